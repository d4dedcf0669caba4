"""Plots and widgets. Every figure has a plain function that returns data and a matplotlib figure; widgets only wrap them."""
