"""Chapter 10's checkpoint-bytes schematic and the arithmetic beside it: the formulas are TinyLM's counts.

Draws with the Agg backend from the capstone's config (LMConfig's defaults on 2 ranks), counts the real
model's parameters and FLOPs (torch's FlopCounterMode on one small micro-batch) and reads a one-process DCP
checkpoint's metadata; launches nothing (a few seconds).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from disttutor.lm import model as lm  # noqa: E402
from disttutor.lm.loop import LMConfig  # noqa: E402
from disttutor.viz.checkpoint_bytes import (KIB, flops_per_token, held_bytes, schematic,  # noqa: E402
                                            tinylm_params, written_bytes, written_tensor_bytes)

VOCAB = 60  # the Genesis corpus's characters


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("d, heads, layers", [(64, 4, 2), (32, 2, 3), (48, 4, 1)])
def test_the_parameter_formula_is_tinylms_count(d, heads, layers):
    model = lm.TinyLM(VOCAB, d, heads, layers)
    assert tinylm_params(VOCAB, d, layers) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("act_ckpt", [False, True])
def test_the_flops_formula_is_what_torch_counts(act_ckpt):
    from torch.utils.flop_counter import FlopCounterMode

    d, heads, layers, seq, batch = 32, 2, 2, 16, 2
    torch.manual_seed(0)
    # dropout as in training (LMConfig's 0.1): attention then runs as explicit matmuls, which the counter sees
    # (a fused CPU attention kernel, taken without dropout, is not counted)
    model = lm.TinyLM(VOCAB, d, heads, layers, dropout=LMConfig().dropout, activation_checkpointing=act_ckpt)
    window = torch.randint(0, VOCAB, (batch, seq + 1))
    with FlopCounterMode(display=False) as counter:
        lm.window_loss(model, window).backward()
    assert counter.get_total_flops() == batch * seq * flops_per_token(VOCAB, d, layers, seq, act_ckpt)


def test_the_schematic_draws_16n_held_and_12n_over_n_written_per_rank():
    cfg, world = LMConfig(), 2
    n = tinylm_params(VOCAB, cfg.d_model, cfg.layers)
    fig = schematic(n, world)
    ax, = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 holds", "rank 0 writes", "rank 1 holds",
                                                            "rank 1 writes"]
    widths = {}  # bar row -> KiB stacked on it
    for bar in ax.patches:
        row = round(bar.get_y() + bar.get_height() / 2)
        widths[row] = widths.get(row, 0.0) + bar.get_width()
    assert widths[0] == pytest.approx(16 * n / KIB) and widths[2] == pytest.approx(16 * n / KIB)
    assert widths[1] == pytest.approx(12 * n / world / KIB) and widths[3] == pytest.approx(12 * n / world / KIB)
    assert sum(held_bytes(n).values()) == 16 * n and sum(written_bytes(n, world).values()) == 12 * n / world
    assert "KiB" in ax.get_xlabel()


def test_a_checkpoints_tensor_bytes_are_read_from_its_metadata(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0)
    model = lm.TinyLM(VOCAB, 32, 2, 1)
    opt = torch.optim.AdamW(model.parameters())
    lm.window_loss(model, torch.randint(0, VOCAB, (2, 9))).backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": {"state": osd["state"]}}, storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    written = written_tensor_bytes(str(tmp_path))
    n, k = tinylm_params(VOCAB, 32, 1), len(list(model.parameters()))
    assert written == {"__0_0.distcp": 12 * n + 4 * k}  # weights, two moments, a 4-byte step a tensor
