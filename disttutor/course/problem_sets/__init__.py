"""The chapters' worked problems, one module per chapter (``chNN.py``), registered on import.

Each module calls :func:`disttutor.course.problems.register` with its ``Problem``s; see
:mod:`disttutor.course.problems` for the fields. Kernel side; imports no torch.
"""
