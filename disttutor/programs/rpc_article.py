"""The article's RPC model-parallel example (§6), as written, made safe to run (chapter 6).

The three stage classes and ``ModelParallelNet`` below are the article's code
unchanged except for sizes (``--vocab``, ``--d-model``, ... default to small
values; ``nn.Transformer``'s other defaults are kept). What is *not* the
article's is the harness, :func:`disttutor.rank.runtime.rpc_setup`, which replaces
``mp.spawn`` + a hard-coded ``MASTER_PORT='29500'`` + ``import os`` (missing in
the article) with torchrun's environment, a short ``rpc_timeout``,
``rpc.shutdown()`` in ``finally`` and a per-rank report for the launcher.

``--stage as-written`` (default) runs the article's forward pass and fails
(each ``.remote().forward(...)`` returns an RRef, and the next stage is handed
that RRef instead of a tensor). ``--stage fixed-calls`` passes tensors
(``.rpc_sync().forward(...)``), so the forward pass works, then tries the
obvious ``loss.backward()`` -- which fails too: without distributed autograd the
result that came back over RPC is cut off from the remote parameters.
:mod:`disttutor.programs.rpc_train` is the corrected, trained version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn as nn
import torch.distributed.rpc as rpc
from torch.distributed.rpc import remote

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

# -- the article's code (sizes as parameters; article: 10000 / 1000 / 10 heads / 10 classes) --------------
SIZES = {"vocab": 10000, "d_model": 1000, "nhead": 10, "classes": 10}


class EmbeddingNet(nn.Module):
    def __init__(self):
        super(EmbeddingNet, self).__init__()
        self.embed = nn.Embedding(SIZES["vocab"], SIZES["d_model"])

    def forward(self, x):
        return self.embed(x)


class TransformerNet(nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        self.transformer = nn.Transformer(d_model=SIZES["d_model"], nhead=SIZES["nhead"])

    def forward(self, x):
        return self.transformer(x, x)


class OutputNet(nn.Module):
    def __init__(self):
        super(OutputNet, self).__init__()
        self.fc = nn.Linear(SIZES["d_model"], SIZES["classes"])

    def forward(self, x):
        return self.fc(x)


class ModelParallelNet(nn.Module):
    def __init__(self):
        super(ModelParallelNet, self).__init__()
        self.embed_rref = remote("worker1", EmbeddingNet)
        self.transformer_rref = remote("worker2", TransformerNet)
        self.output_rref = remote("worker3", OutputNet)

    def forward(self, x):
        x_emb = self.embed_rref.remote().forward(x)
        x_trans = self.transformer_rref.remote().forward(x_emb)
        x_out = self.output_rref.remote().forward(x_trans)
        return x_out.to_here()
# -- end of the article's code ------------------------------------------------------------------------------


class FixedCallsNet(ModelParallelNet):
    """Bug 1 fixed: ``rpc_sync()`` returns the stage's *tensor*, which the next stage can use."""

    def forward(self, x):
        x_emb = self.embed_rref.rpc_sync().forward(x)
        x_trans = self.transformer_rref.rpc_sync().forward(x_emb)
        return self.output_rref.rpc_sync().forward(x_trans)


def stage_grads(module_rref) -> list[int]:
    """Runs on a stage's owner: ``[params with a .grad, params]`` of the module it holds."""
    params = list(module_rref.local_value().parameters())
    return [sum(p.grad is not None for p in params), len(params)]


Stage = Literal["as-written", "fixed-calls"]


@dataclass(frozen=True)
class ArticleConfig:
    stage: Stage = opt("as-written", "the article's code, or its calls fixed")
    vocab: int = opt(100, "vocabulary size (article: 10000)")
    d_model: int = opt(16, "model width (article: 1000)")
    nhead: int = opt(2, "attention heads (article: 10)")
    classes: int = opt(10, "output classes")
    batch: int = opt(32, "sequences per batch (the article's input is (32, 50))")
    seq: int = opt(50, "tokens per sequence")

    def __post_init__(self):
        if self.stage not in get_args(Stage):  # the command line checks choices; Python callers are checked here
            raise ValueError(f"stage must be 'as-written' or 'fixed-calls', got {self.stage!r}")
        require_positive(self, "vocab", "d_model", "nhead", "classes", "batch", "seq")
        if self.d_model % self.nhead:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by nhead ({self.nhead})")


def run(cfg: ArticleConfig) -> None:
    SIZES.update(vocab=cfg.vocab, d_model=cfg.d_model, nhead=cfg.nhead, classes=cfg.classes)
    with runtime.rpc_setup() as env:
        if env.world_size != 4:
            raise ValueError(f"the article's model needs 4 ranks (master + worker1..3), got {env.world_size}")
        if env.rank == 0:  # the article's "master"; workers 1..3 only serve RPCs until shutdown
            torch.manual_seed(0)
            input_data = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
            model = (ModelParallelNet if cfg.stage == "as-written" else FixedCallsNet)()
            output = model(input_data)
            runtime.report(output_shape=list(output.shape), output_requires_grad=output.requires_grad,
                       local_params=sum(p.numel() for p in model.parameters()))
            print(output.shape, flush=True)
            if cfg.stage == "fixed-calls":
                output.sum().backward()  # what a learner would try next: it runs without an error...
                rrefs = [model.embed_rref, model.transformer_rref, model.output_rref]
                # ...but did any remote parameter receive a gradient? Ask each owner.
                runtime.report(remote_grads={f"worker{i + 1}": rpc.rpc_sync(r.owner(), stage_grads, args=(r,))
                                         for i, r in enumerate(rrefs)})


main = cli(ArticleConfig, run)  # the command line is derived from ArticleConfig's fields



if __name__ == "__main__":
    # RPC pickles classes and functions by module path: run the copy imported as
    # disttutor.programs.rpc_article, not __main__, so every rank resolves the same names.
    from disttutor.programs.rpc_article import main as _main

    _main()
