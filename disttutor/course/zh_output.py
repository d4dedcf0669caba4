"""The Chinese edition, live: what a cell prints in a zh kernel passes through the message catalogue.

The stored zh notebooks carry the English run's outputs with the catalogue applied at build time
(``scripts/translate.py build``). When a learner runs a zh notebook, the chapter's header cell calls
:func:`install`: the kernel's stdout is translated line by line (a line is complete before it is
looked up, so a message printed in pieces is still found) and every rich output (Markdown tables,
verdicts) passes through the same catalogue. Error texts (stderr, tracebacks, text in backticks),
numbers and code are left as they are. English kernels are never touched.

Kernel side; imports no torch.
"""
from __future__ import annotations

import sys

from disttutor.course import messages

__all__ = ["install", "uninstall", "Translating"]


class Translating:
    """A text stream that forwards complete lines, translated, to ``inner``."""

    def __init__(self, inner):
        self.inner = inner
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, self._pending = self._pending.rsplit("\n", 1)
            self.inner.write(messages.apply(done + "\n"))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.inner.write(messages.apply(self._pending))
            self._pending = ""
        self.inner.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding ... of the stream it wraps
        return getattr(self.inner, name)


def _format_wrapped(fmt):
    def format(obj, include=None, exclude=None):
        data, meta = fmt(obj, include=include, exclude=exclude)
        return {k: messages.apply(v) if k in ("text/markdown", "text/plain") and isinstance(v, str) else v
                for k, v in data.items()}, meta
    format.disttutor_zh = fmt
    return format


def install(ip=None) -> bool:
    """Translate this kernel's printed and displayed text (idempotent). False outside IPython."""
    if ip is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        ip = get_ipython()
    if ip is None:
        return False
    if not isinstance(sys.stdout, Translating):
        sys.stdout = Translating(sys.stdout)
    df = ip.display_formatter
    if not hasattr(df.format, "disttutor_zh"):
        df.format = _format_wrapped(df.format)
    return True


def uninstall(ip=None) -> None:
    if isinstance(sys.stdout, Translating):
        sys.stdout.flush()
        sys.stdout = sys.stdout.inner
    if ip is None:
        from IPython import get_ipython
        ip = get_ipython()
    if ip is not None and hasattr(ip.display_formatter.format, "disttutor_zh"):
        ip.display_formatter.format = ip.display_formatter.format.disttutor_zh
