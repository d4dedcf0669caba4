"""The article's §10 language model, verbatim, so chapter 10 can run it and show what is wrong.

:data:`ARTICLE_MODEL` is the article's code (§10.1) character for character, with the
article's own import block (§10.2) in front of it; :func:`load` executes it in a fresh
namespace. ``load(runnable=True)`` applies only the two fixes without which nothing runs
at all (``import math``; ``self.d_model = d_model``), so the *silent* bugs can be shown:
the model then runs, trains, and is still not a language model.

:data:`ARTICLE_CHECKPOINTING` is §10.3's activation-checkpointing wrapper, also verbatim.
The corrected model is :mod:`disttutor.lm.model`; ``tests/test_ch10_model.py`` has one test per bug.
"""
from __future__ import annotations

from typing import Any

# The import block the article puts before §10.1's classes (§10.2's first lines): no `import math`.
ARTICLE_IMPORTS = """\
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
"""

ARTICLE_MODEL = """\
class TransformerModel(nn.Module):
    def __init__(self, vocab_size, d_model, nhead, num_layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoder = PositionalEncoding(d_model)
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead)
        self.transformer = nn.TransformerEncoder(encoder_layer, num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        x = self.embedding(x) * math.sqrt(self.d_model)
        x = self.pos_encoder(x)
        x = self.transformer(x)
        x = self.fc(x)
        return x

class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() *
                            (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return x + self.pe[:x.size(0), :]
"""

ARTICLE_CHECKPOINTING = """\
from torch.utils.checkpoint import checkpoint

class CheckpointedTransformer(nn.Module):
    def __init__(self, transformer_layer):
        super().__init__()
        self.transformer_layer = transformer_layer

    def forward(self, x):
        return checkpoint(self.transformer_layer, x)
"""

# The two edits without which the article's model cannot even be built or called.
_RUNNABLE_FIXES = (
    ("import torch\n", "import math\nimport torch\n"),
    ("        super().__init__()\n        self.embedding",
     "        super().__init__()\n        self.d_model = d_model\n        self.embedding"),
)


def source(runnable: bool = False) -> str:
    """The article's imports + model; with ``runnable``, plus ``import math`` and ``self.d_model``."""
    src = ARTICLE_IMPORTS + "\n" + ARTICLE_MODEL
    if runnable:
        for old, new in _RUNNABLE_FIXES:
            assert src.count(old) == 1, old  # the article text is fixed: each fix applies exactly once
            src = src.replace(old, new)
    return src


def load(runnable: bool = False) -> dict[str, Any]:
    """Execute the article's code; returns its namespace (``TransformerModel``, ``PositionalEncoding``)."""
    ns: dict[str, Any] = {"__name__": "article_section_10"}
    exec(compile(source(runnable), "<article §10.1>", "exec"), ns)
    return ns


def load_checkpointing() -> dict[str, Any]:
    """§10.3's ``CheckpointedTransformer`` (with the article's imports)."""
    ns: dict[str, Any] = {"__name__": "article_section_10_3"}
    exec(compile(ARTICLE_IMPORTS + ARTICLE_CHECKPOINTING, "<article §10.3>", "exec"), ns)
    return ns
