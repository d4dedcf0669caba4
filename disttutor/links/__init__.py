"""Emulated network links (chapters 2 and 8): the slow networks a laptop does not have.

``presets`` holds link figures (latency alpha, bandwidth beta) with their sources; ``emulated`` is
the link itself (a clock that completes each transfer after ``alpha + bytes / beta`` without using
the CPU); ``ddp_hooks`` puts DDP's buckets on it; ``p2p`` puts the from-scratch all-reduces of
:mod:`disttutor.scratch.allreduce` on it.
"""
