"""Watch a learner's collectives on a checker's ranks: which ones, with which root, in what order.

Introduced in chapter 1 (Exercise 1.2) and used again in chapter 3 (Exercise 3.2). While a
:class:`Watch` is active, every call of a wrapped ``torch.distributed`` collective first makes
all ranks *agree* on it: each rank says what it is about to call (``dist.reduce(dst=0)``) and
all ranks compare (one small ``all_gather_object``, the checker's own). Two ranks calling
different collectives, or the same one with different roots, would otherwise wait on each
other until a timeout (or, worse, pair up wrongly); here they stop at once with a message that
names every rank's call. The checker calls :meth:`Watch.agree` itself at the end of the learner's
function, so a rank that returned early is named too. Every call is recorded
(``Watch.calls``: name, root, elements) for the checker's own diagnosis.

Only collectives are wrapped: point-to-point ``send``/``recv`` pair up between two ranks and
are left alone (a mismatch there ends with the job's short collective timeout).
"""
from __future__ import annotations

from typing import Any

WRAPPED = ("all_reduce", "reduce", "broadcast", "all_gather", "gather", "scatter", "reduce_scatter",
           "all_gather_into_tensor", "reduce_scatter_tensor")
# the root's keyword and its position among the arguments after the tensor (torch 2.13: reduce(tensor, dst, ...),
# broadcast(tensor, src, ...), gather(tensor, gather_list, dst, ...), scatter(tensor, scatter_list, src, ...));
# a root left out (None) is global rank 0, and group_dst / group_src name it by its rank in the group
ROOT_ARG = {"reduce": ("dst", 0), "gather": ("dst", 1), "broadcast": ("src", 0), "scatter": ("src", 1)}


class Mismatch(RuntimeError):
    """The ranks disagreed on a collective: the message names each rank's call."""


def _numel(x: Any) -> int:
    if hasattr(x, "numel"):
        return int(x.numel())
    if isinstance(x, (list, tuple)):
        return sum(_numel(t) for t in x)
    return 0


class Watch:
    """Context manager: wraps ``dist.<collective>`` with agreement and recording; ``where`` names the moment."""

    def __init__(self):
        import torch.distributed as dist

        self.dist, self.calls, self.where, self.count = dist, [], "", 0
        self.originals = {n: getattr(dist, n) for n in WRAPPED if hasattr(dist, n)}

    def at(self, where: str) -> None:
        """Name the moment (``step 2``) the next calls belong to; their count starts again."""
        self.where, self.count = where, 0

    def agree(self, what: str) -> None:
        """All ranks state ``what`` they do now; raise :class:`Mismatch` naming them if they differ."""
        self.count += 1
        said: list[Any] = [None] * self.dist.get_world_size()
        self.dist.all_gather_object(said, what)  # the checker's own collective: never a wrapped one
        if len(set(said)) > 1:
            calls = "; ".join(f"rank {r}: {s}" for r, s in enumerate(said))
            raise Mismatch(f"{self.where}, collective call {self.count}: the ranks disagree ({calls}) -- every "
                           "rank must call the same collectives, with the same root, in the same order; "
                           "one alone waits for the others forever")

    def _wrap(self, name: str):
        original = self.originals[name]

        def wrapper(tensor, *args, **kwargs):
            key, pos = ROOT_ARG.get(name, (None, 0))
            root = None
            if key:
                root = kwargs.get(key, args[pos] if len(args) > pos else None)
                if root is None:
                    root = kwargs.get(f"group_{key}")
                root = 0 if root is None else root
                root = root if isinstance(root, int) else f"<{type(root).__name__}>"  # never a tensor's repr
            numel = _numel(tensor)  # two calls of one collective on tensors of different sizes pair up wrongly
            self.agree(f"dist.{name}({f'{key}={root}, ' if key else ''}{numel} element{'s' * (numel != 1)})")
            self.calls.append({"name": name, "root": root, "numel": numel, "where": self.where})
            return original(tensor, *args, **kwargs)

        return wrapper

    def __enter__(self) -> "Watch":
        for name in self.originals:  # learner code looks them up as dist.<name> at call time
            setattr(self.dist, name, self._wrap(name))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self.originals.items():
            setattr(self.dist, name, fn)

    def since(self, start: int) -> list[dict[str, Any]]:
        return self.calls[start:]
