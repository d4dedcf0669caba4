"""Plain, copyable scripts: one per technique, ``torch`` only (no ``disttutor`` import).

Copy one to your own machine or cluster and run it with torchrun::

    torchrun --nproc-per-node 2 ddp.py           # CPU: gloo; with GPUs: NCCL, one GPU per rank

Each script picks its backend and device from what the machine has, so the same file runs on a
laptop's CPU cores and on a GPU node unchanged. ``tests/test_plain_scripts.py`` runs every script here
on 2 CPU ranks and checks it exits 0 having printed its success line (rank 0 prints `NAME: OK ...`); ``python3 course.py plain NAME`` prints one
(``--out DIR`` copies them). The course's instrumented programs (``disttutor/programs/``) teach the
same techniques with measurements; these are what you keep.
"""
