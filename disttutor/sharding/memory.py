"""How much memory does training need, per device? The formulas of chapter 1.

Introduced in chapter 1 (why distributed training). Pure Python, no torch:
the notebook checks these formulas against real tensors, the widget in
:mod:`disttutor.viz.memory` draws them.

Training memory has four parts. The first three scale with the number of
parameters ``P`` (bytes per parameter, the ZeRO paper's accounting,
Rajbhandari et al. 2020):

=====================  =======  ==============  ===============================
precision / optimizer  weights  gradients       optimizer states
=====================  =======  ==============  ===============================
fp32, SGD              4        4               0
fp32, SGD + momentum   4        4               4  (momentum buffer)
fp32, Adam(W)          4        4               8  (exp_avg, exp_avg_sq)
mixed, SGD             2        2               4  (fp32 master weights)
mixed, SGD + momentum  2        2               8  (master + momentum)
mixed, Adam(W)         2        2               12 (master + exp_avg + exp_avg_sq)
=====================  =======  ==============  ===============================

"mixed" is 16-bit (fp16 or bf16) weights and gradients with an fp32 master
copy kept by the optimizer (Megatron / DeepSpeed style). Note that Adam costs
16 bytes per parameter either way: mixed precision saves *activation* memory
and time, not optimizer memory. (``torch.autocast`` keeps fp32 parameters, so
it is the fp32 row for the states; its saving is in the activations too.)

The fourth part, activations, scales with batch x sequence length x width x
depth. For a GPT-style Transformer layer without activation recomputation we
use Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), generalised from 2-byte to ``e``-byte activations::

    per layer  = s*b*h * (4e + 2 + 12e/t)  +  a*s*s*b * (2e + 1) / t     bytes
    (e = 2, t = 1:  s*b*h * 34 + 5*a*s*s*b,  the paper's formula)

with ``s`` sequence length, ``b`` micro-batch, ``h`` hidden size, ``a`` heads,
``t`` tensor-parallel degree; the ``+2`` and ``+1`` are 1-byte dropout masks.
It is an *estimate* for one particular implementation (Megatron's): it leaves
out the embedding and logits, and fused attention kernels (FlashAttention,
PyTorch's SDPA) do not store the ``s x s`` scores at all. The notebook
measures what PyTorch really saves and shows how far off the estimate is.

How the parallel strategies change each part, per device, with data-parallel
degree ``dp``, tensor-parallel degree ``tp`` and pipeline degree ``pp``
(``dp * tp * pp`` devices):

* data parallel: every device holds *everything* (weights, grads, states);
  only the batch is split, so activations shrink by ``dp``.
* ZeRO-1 / -2 / -3 (FSDP ``SHARD_GRAD_OP`` ~ stage 2, ``FULL_SHARD`` /
  ``fully_shard`` ~ stage 3) divide optimizer states / + gradients /
  + weights by ``dp`` (weights are gathered layer by layer when needed; that
  transient buffer is ignored here).
* tensor and pipeline parallel split the model: weights, grads and states
  are divided by ``tp * pp``; pipeline stages hold ``L / pp`` layers of
  activations (for *all* micro-batches of the step under the GPipe schedule
  assumed here), tensor parallel divides the ``12e/t`` and ``s x s`` terms.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

PRECISIONS = ("fp32", "mixed")
OPTIMIZERS = ("sgd", "momentum", "adam")
PARTS = ("weights", "gradients", "optimizer", "activations")
GIB = 1024**3

#: GPT-style shapes (layers, hidden, heads) for the calculator; the parameter
#: count is computed from the shape, not quoted from any paper.
PRESETS: dict[str, tuple[int, int, int]] = {
    "GPT-2 small (12 x 768)": (12, 768, 12),
    "GPT 1.3B-like (24 x 2048)": (24, 2048, 16),
    "GPT 7B-like (32 x 4096)": (32, 4096, 32),
    "GPT 13B-like (40 x 5120)": (40, 5120, 40),
    "GPT 70B-like (80 x 8192)": (80, 8192, 64),
}


def bytes_per_param(precision: str, optimizer: str) -> dict[str, int]:
    """Bytes per parameter for weights, gradients and optimizer states (table above)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    w = 4 if precision == "fp32" else 2
    states = {"sgd": 0, "momentum": 4, "adam": 8}[optimizer]  # fp32 buffers per parameter
    master = 0 if precision == "fp32" else 4  # fp32 copy the optimizer updates
    return {"weights": w, "gradients": w, "optimizer": states + master}


def transformer_params(layers: int, hidden: int, vocab: int = 50257, max_seq: int = 1024) -> int:
    """Parameters of a GPT-style model: ``12 L h^2 + 13 L h`` for the blocks + embeddings + final norm.

    One block: QKV and output projections ``4h^2 + 4h``, MLP ``h -> 4h -> h``
    ``8h^2 + 5h``, two LayerNorms ``4h`` (the notebook checks this against
    ``nn.TransformerEncoderLayer``). Embeddings ``(vocab + max_seq) * h`` (the
    output layer shares the token embedding), final LayerNorm ``2h``.
    """
    return 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + max_seq) * hidden + 2 * hidden


def activation_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int, elem_bytes: int, tp: int = 1) -> float:
    """Korthikanti et al. estimate for one Transformer layer (see the module docstring)."""
    sbh = seq * batch * hidden
    return sbh * (4 * elem_bytes + 2 + 12 * elem_bytes / tp) + heads * seq * seq * batch * (2 * elem_bytes + 1) / tp


def mlp_activation_bytes(batch: int, d_in: int, hidden: list[int] | tuple[int, ...], elem_bytes: int = 4) -> int:
    """What autograd saves for ``models.MLP`` (exact, not an estimate).

    Each ``Linear`` saves its input (to compute the weight gradient) and each
    ``ReLU`` its output, which *is* the next ``Linear``'s input (same tensor,
    stored once): ``batch * (d_in + sum(hidden))`` elements.
    """
    return batch * (d_in + sum(hidden)) * elem_bytes


@dataclass(frozen=True)
class TrainingSetup:
    """A model and how it is trained, split over ``dp * tp * pp`` devices.

    ``batch`` is the *global* batch (sequences per optimizer step).
    """

    layers: int = 12
    hidden: int = 768
    heads: int = 12
    vocab: int = 50257
    seq: int = 1024
    batch: int = 8
    precision: str = "mixed"
    optimizer: str = "adam"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0  # ZeRO stage over the data-parallel group: 0 (plain DP), 1, 2, 3 (~FSDP full shard)

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "vocab", "seq", "batch", "dp", "tp", "pp"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        bytes_per_param(self.precision, self.optimizer)  # validates both names
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0, 1, 2 or 3 (ZeRO stage), got {self.zero!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.tp:
            raise ValueError(f"tensor parallel splits attention heads: heads ({self.heads}) must be divisible by tp ({self.tp})")
        if self.layers % self.pp:
            raise ValueError(f"pipeline stages hold whole layers: layers ({self.layers}) must be divisible by pp ({self.pp})")
        if self.batch % self.dp:
            raise ValueError(f"data parallel splits the batch: batch ({self.batch}) must be divisible by dp ({self.dp})")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def params(self) -> int:
        return transformer_params(self.layers, self.hidden, self.vocab, self.seq)


def per_device(cfg: TrainingSetup) -> dict[str, float]:
    """Bytes per device for each of :data:`PARTS`, plus ``total``."""
    bpp = bytes_per_param(cfg.precision, cfg.optimizer)
    model_split = cfg.tp * cfg.pp  # each device holds 1/(tp*pp) of the model
    # ZeRO shards over the data-parallel replicas: stage 1 the states, 2 also grads, 3 also weights.
    shard = {part: (cfg.dp if cfg.zero >= stage else 1)
             for part, stage in (("optimizer", 1), ("gradients", 2), ("weights", 3))}
    out = {part: cfg.params * bpp[part] / model_split / shard[part] for part in ("weights", "gradients", "optimizer")}
    elem = 4 if cfg.precision == "fp32" else 2
    local_batch = cfg.batch // cfg.dp  # data parallel: each replica sees batch/dp sequences
    out["activations"] = (cfg.layers // cfg.pp) * activation_bytes_per_layer(
        cfg.seq, local_batch, cfg.hidden, cfg.heads, elem, cfg.tp)
    out["total"] = sum(out[p] for p in PARTS)
    return out


def strategies(cfg: TrainingSetup, n: int) -> dict[str, TrainingSetup]:
    """The same model and global batch on 1 device and on ``n`` devices, split each way.

    Strategies that ``cfg`` cannot be split into (e.g. ``layers % n != 0`` for
    the pipeline) are left out rather than silently rounded.
    """
    base = {k: v for k, v in asdict(cfg).items() if k not in ("dp", "tp", "pp", "zero")}
    options = {"1 device": {}, f"DP x{n}": {"dp": n}, f"ZeRO-1 x{n}": {"dp": n, "zero": 1},
               f"ZeRO-2 x{n}": {"dp": n, "zero": 2}, f"ZeRO-3/FSDP x{n}": {"dp": n, "zero": 3},
               f"tensor x{n}": {"tp": n}, f"pipeline x{n}": {"pp": n}}
    out = {}
    for name, kw in options.items():
        try:
            out[name] = TrainingSetup(**base, **kw)
        except ValueError:
            continue
    return out


# --- measuring (takes torch objects; this module itself never imports torch) ---------------

def measured_state_bytes(model, optimizer=None) -> dict[str, int]:
    """Bytes really held by a model's weights and gradients and an optimizer's state tensors.

    ``optimizer`` must have taken a step (PyTorch creates its state lazily).
    The per-tensor ``step`` counters Adam keeps are reported apart
    (``step_counters``): they are one scalar per parameter *tensor*, not per
    parameter, which is why the per-parameter table ignores them.
    """
    params = list(model.parameters())
    out = {"weights": sum(p.numel() * p.element_size() for p in params),
           "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
           "optimizer": 0, "step_counters": 0}
    for state in (optimizer.state.values() if optimizer is not None else ()):
        for name, t in state.items():
            key = "step_counters" if name == "step" else "optimizer"
            out[key] += t.numel() * t.element_size()
    return out


def saved_activation_bytes(fn, params=()) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs (parameters excluded).

    Uses ``torch.autograd.graph.saved_tensors_hooks``; tensors sharing one
    storage (a ReLU output that is also the next Linear's input, a weight's
    transpose) are counted once, as they are stored once.
    """
    import torch

    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
