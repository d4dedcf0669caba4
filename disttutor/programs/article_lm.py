"""Run the article's §10 code under DDP as it is written, with the first ``--fixes K`` fixes (chapter 10).

Each rank runs §10.2's ``train(rank, world_size)`` (verbatim at ``--fixes 0``, at CPU size) and
reports the failure it meets as one line; chapter 10 launches it with K = 0, 1, 2, ... (one fresh
job per attempt: a process re-creating its default group after a failure races its peer's
connections) until ``train`` finishes. ``--snippets`` runs §10.3's three snippets as written, in
the state the fully fixed ``train()`` builds before its loop (a job of its own, for the same reason). GPUs are hidden on purpose: every machine
shows the same ladder (on a GPU node the first and third fixes are not needed). The course's
collective timeout bounds the group ``train()`` makes (the user-script safety net)::

    disttutor run article_lm -n 2 -- --fixes 0
"""
from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch: the same ladder on every machine

import contextlib  # noqa: E402
import io  # noqa: E402
import textwrap  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from disttutor.contract.options import cli, opt  # noqa: E402
from disttutor.lm import article, article_ddp, corpus  # noqa: E402
from disttutor.rank import runtime, user_script  # noqa: E402

SEQ = 32


@dataclass(frozen=True)
class ArticleLMConfig:
    fixes: int = opt(0, "how many of lm.article_ddp.FIXES to apply (0: the article as written)")
    snippets: bool = opt(False, "run §10.3's snippets (in the state the fully fixed train() builds) instead")
    batches: int = opt(3, "batches per rank in the one epoch (the article's 100 epochs, shortened)")

    def __post_init__(self):
        if not 0 <= self.fixes <= len(article_ddp.FIXES):
            raise ValueError(f"fixes must be 0..{len(article_ddp.FIXES)}, got {self.fixes}")


class TextDataset(torch.utils.data.Dataset):
    """The fix for ``TextDataset(...)``: Genesis windows, (input, input shifted by one)."""

    def __init__(self, n: int = 48):
        self.w = corpus.windows(corpus.splits()[0], SEQ)[:n]

    def __len__(self):
        return len(self.w)

    def __getitem__(self, i):
        return self.w[i, :-1], self.w[i, 1:]


def one_line(exc: BaseException, where: str, src: str) -> str:
    """``Type: first line of the message [at §10.x: the article's line that raised]``."""
    msg = (str(exc).strip().splitlines() or [""])[0][:150]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == where]
    lines = src.splitlines()
    at = f" [at {where[1:-1]}: {lines[frames[-1].lineno - 1].strip()}]" if frames and frames[-1].lineno <= len(lines) else ""
    return f"{type(exc).__name__}: {msg}{at}"


def namespace(k: int, n: int) -> dict:
    """What train() sees at attempt ``k``: the article's imports and model, plus the fixes so far."""
    ns: dict = {"__name__": "article_section_10", "VOCAB": corpus.tokenizer().vocab_size}
    exec(article_ddp.prelude(k), ns)
    exec(compile(article_ddp.model_source(k), "<article §10.1>", "exec"), ns)
    if k > 4:  # the fix "a TextDataset"
        ns["TextDataset"] = lambda: TextDataset(n)
    return ns


def leave_group() -> None:
    """Destroy the group train() left behind -- after a barrier: gloo's connections are made pairwise,
    and a rank that destroys its group while its peer is still connecting to it would leave that
    peer connecting to a closed port (and the next attempt's rendezvous waiting for it)."""
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.barrier()
        dist.destroy_process_group()


def attempt(k: int, n: int, rank: int, world: int) -> dict:
    ns = namespace(k, n)
    src = article_ddp.train_source(k)
    exec(compile(src, "<article §10.2>", "exec"), ns)
    out, err = io.StringIO(), None
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        try:
            ns["train"](rank, world)
        except Exception as e:  # the failure this attempt meets: one line, then the next fix
            err = one_line(e, "<article §10.2>", src)
        finally:
            leave_group()
    seen = sorted({str(w.message).splitlines()[0][:160] for w in caught})
    return {"fixes": k, "error": err, "warnings": seen, "printed": out.getvalue().strip()}


def snippets(n: int, rank: int, world: int) -> dict:
    """§10.3's snippets as written, in the state the fixed train() builds before its loop."""
    k = len(article_ddp.FIXES)
    ns = namespace(k, n)
    head = article_ddp.train_source(k).split("    # 训练循环")[0].split("\n", 1)[1]   # train()'s set-up
    res = {}
    try:
        ns.update(rank=rank, world_size=world)
        exec(compile(textwrap.dedent(head), "<article §10.2>", "exec"), ns)
        for name, src in (("checkpointing", article_ddp.ARTICLE_CHECKPOINT_USE),
                          ("accumulation", article_ddp.ARTICLE_ACCUMULATION.replace(
                              "with autocast():", "with autocast(device.type):")),  # the fix §10.2 needed
                          ("adamw", article_ddp.ARTICLE_ADAMW)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    exec(compile(src, "<article §10.3>", "exec"), ns)
                    res[name] = "ran"
                except Exception as e:
                    res[name] = one_line(e, "<article §10.3>", src)
            res[name + "_warnings"] = sorted({str(w.message).splitlines()[0][:160] for w in caught})
        res["adamw_type"] = type(ns.get("optimizer")).__name__
        # the checkpointing snippet once d_model and nhead exist (the sizes train() uses): call it
        ns.update(d_model=64, nhead=4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(article_ddp.ARTICLE_CHECKPOINT_USE, "<article §10.3>", "exec"), ns)
                h = torch.randn(SEQ, 8, 64, requires_grad=True)
                ns["checkpointed_layer"](h).sum().backward()
                res["checkpointing_defined"] = "ran" if h.grad is not None else "no gradient"
            except Exception as e:
                res["checkpointing_defined"] = one_line(e, "<article §10.3>", article_ddp.ARTICLE_CHECKPOINT_USE)
        res["checkpointing_defined_warnings"] = sorted({str(w.message).splitlines()[0][:160] for w in caught})
    finally:
        leave_group()
    return res


def run(cfg: ArticleLMConfig) -> None:
    with runtime.setup(init_group=False) as ctx:   # train() makes its own process group, as written
        user_script.install(ctx.timeout_s)          # ...bounded by the course's collective timeout
        os.chdir(runtime.run_dir() or ".")          # torch.save('transformer_model.pt') lands in the run dir
        n = 8 * cfg.batches * ctx.world_size
        if cfg.snippets:
            runtime.report(snippets=snippets(n, ctx.rank, ctx.world_size))
            return
        res = attempt(cfg.fixes, n, ctx.rank, ctx.world_size)
        runtime.rank_print(f"fixes {cfg.fixes}: {res['error'] or 'train() finished'}")
        keys = []
        if res["error"] is None and ctx.rank == 0:
            keys = list(torch.load("transformer_model.pt", weights_only=True))
        runtime.report(**res, saved_keys=keys[:3])


main = cli(ArticleLMConfig, run)


if __name__ == "__main__":
    main()
