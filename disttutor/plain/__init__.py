"""Plain, copyable torch-only scripts, one per technique (no disttutor import).

Each runs as ``torchrun --nproc-per-node 2 disttutor/plain/NAME.py`` on CPU (gloo) and unchanged
on GPUs (NCCL, one GPU per rank). Chapters show them with ``show_code("disttutor.plain.NAME")``.
"""
