"""The chapters' puzzles, one module per chapter (``chNN.py``), registered on import.

Each module calls :func:`disttutor.course.puzzles.register` with its ``Puzzle``s; see
:mod:`disttutor.course.puzzles` for the fields. Kernel side; imports no torch.
"""
