"""The course as a static website: ``python3 course.py site`` (see ``build.py``)."""
