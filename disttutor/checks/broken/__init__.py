"""The broken programs of the "fix the bug" exercises (9.2, 9.3), exactly as the notebook shows them.

The checker compares a learner's code with these to say "still the broken program" when nothing
was changed; a test keeps each file equal to its notebook cell.
"""
