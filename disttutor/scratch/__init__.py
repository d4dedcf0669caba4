"""From-scratch reference implementations that the exercises rebuild (all-reduce algorithms, DDP, ...)."""
