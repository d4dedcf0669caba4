"""The course's exercises as data, in chapter order: :mod:`.early` (chapters 0-6), :mod:`.late` (7-13).

:mod:`disttutor.checks.registry` joins them into the one list, ``EXERCISES``.
"""
