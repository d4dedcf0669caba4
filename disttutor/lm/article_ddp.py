"""The article's §10.2 training function and §10.3 snippets, verbatim, and the fixes each needs to start.

Chapter 10 runs them under DDP on 2 ranks (``disttutor.programs.article_lm``): attempt 0 is the
article's text as written; attempt k applies the first k fixes of :data:`FIXES`, each the smallest
edit that gets past the failure attempt k-1 met (its ``expect`` is a piece of that failure's text, so
a run whose failures differ from the ladder says so instead of silently skipping a step).
:data:`SIZES` shrinks the model and the run (vocabulary, width, depth, batch, epochs, loader workers) to CPU size:
they change how long it runs, not whether it starts, and are applied to every attempt.
"""
from __future__ import annotations

from dataclasses import dataclass

# §10.2, character for character (the comments translated in the chapter, not here).
ARTICLE_TRAIN = """\
def train(rank, world_size):
    # 初始化进程组
    dist.init_process_group(
        backend='nccl',
        rank=rank,
        world_size=world_size
    )

    # 创建模型并移至当前设备
    model = TransformerModel(
        vocab_size=50000,
        d_model=512,
        nhead=8,
        num_layers=6
    ).to(rank)

    # 使用DDP包装模型
    model = DDP(model, device_ids=[rank])

    # 创建数据加载器
    dataset = TextDataset(...)  # 自定义文本数据集
    sampler = DistributedSampler(
        dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=True
    )
    dataloader = DataLoader(
        dataset,
        batch_size=32,
        sampler=sampler,
        num_workers=4,
        pin_memory=True
    )

    # 定义优化器和损失函数
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    criterion = nn.CrossEntropyLoss(ignore_index=0)

    # 初始化混合精度训练
    scaler = GradScaler()

    # 训练循环
    for epoch in range(100):
        sampler.set_epoch(epoch)

        for batch_idx, (data, target) in enumerate(dataloader):
            data, target = data.to(rank), target.to(rank)

            optimizer.zero_grad()

            # 混合精度训练
            with autocast():
                output = model(data)
                loss = criterion(output.view(-1, output.size(-1)), target.view(-1))

            # 梯度缩放和反向传播
            scaler.scale(loss).backward()

            # 梯度裁剪
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)

            # 更新参数
            scaler.step(optimizer)
            scaler.update()

            if batch_idx % 100 == 0 and rank == 0:
                print(f'Epoch {epoch}, Step {batch_idx}, Loss: {loss.item()}')

    # 保存模型（只在主进程）
    if rank == 0:
        torch.save(model.state_dict(), 'transformer_model.pt')

    dist.destroy_process_group()
"""

# §10.3's three snippets, verbatim: activation checkpointing, accumulation, AdamW.
ARTICLE_CHECKPOINT_USE = """\
from torch.utils.checkpoint import checkpoint

class CheckpointedTransformer(nn.Module):
    def __init__(self, transformer_layer):
        super().__init__()
        self.transformer_layer = transformer_layer

    def forward(self, x):
        return checkpoint(self.transformer_layer, x)

# 在模型中使用
encoder_layer = nn.TransformerEncoderLayer(d_model, nhead)
checkpointed_layer = CheckpointedTransformer(encoder_layer)
"""

ARTICLE_ACCUMULATION = """\
accumulation_steps = 4

for batch_idx, (data, target) in enumerate(dataloader):
    with autocast():
        output = model(data)
        loss = criterion(output, target) / accumulation_steps

    scaler.scale(loss).backward()

    if (batch_idx + 1) % accumulation_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""

ARTICLE_ADAMW = """\
from torch.optim import AdamW

optimizer = AdamW(
    model.parameters(),
    lr=1e-4,
    weight_decay=0.01,
    betas=(0.9, 0.999),
    eps=1e-8
)
"""


@dataclass(frozen=True)
class Fix:
    name: str      # one line for the table
    expect: str    # a piece of the error the previous attempt must have met
    edits: tuple[tuple[str, str], ...]   # (old, new) text replacements in ARTICLE_TRAIN
    model_edits: tuple[tuple[str, str], ...] = ()   # ... in the article's model (lm.article.ARTICLE_MODEL)
    imports: str = ""                    # lines added to the article's import block


# Sizes for 2 CPU ranks (every attempt): not fixes, the same code at a size that ends in seconds.
SIZES: tuple[tuple[str, str], ...] = (
    ("vocab_size=50000", "vocab_size=VOCAB"),
    ("d_model=512", "d_model=64"),
    ("nhead=8", "nhead=4"),
    ("num_layers=6", "num_layers=2"),
    ("batch_size=32", "batch_size=8"),
    ("for epoch in range(100):", "for epoch in range(1):"),
    # 4 worker processes forked from each rank: 8 more processes on a 2-core machine, each forked from a
    # process whose gloo threads are running (chapter 8 measures DataLoader workers on their own).
    ("num_workers=4", "num_workers=0"),
)

FIXES: tuple[Fix, ...] = (
    Fix("backend: gloo where there is no GPU", "NCCL",
        (("backend='nccl'", "backend='nccl' if torch.cuda.is_available() else 'gloo'"),)),
    Fix("import math (used by PositionalEncoding, never imported)", "name 'math' is not defined", (),
        imports="import math\n"),
    # CPU build: "Cannot access accelerator device when none is available"; a CUDA build with the GPUs
    # hidden: "No CUDA GPUs are available"
    Fix("a device from LOCAL_RANK, not the integer rank", "available",
        (("    # 创建模型并移至当前设备\n",
          "    # 创建模型并移至当前设备\n    device = torch.device('cuda', int(os.environ['LOCAL_RANK'])) "
          "if torch.cuda.is_available() else torch.device('cpu')\n"),
         (".to(rank)", ".to(device)")), imports="import os\n"),
    Fix("device_ids only for a GPU module", "device_ids",
        (("DDP(model, device_ids=[rank])",
          "DDP(model, device_ids=[device.index] if device.type == 'cuda' else None)"),)),
    Fix("a TextDataset (the article never defines one): Genesis windows, target = input shifted by one",
        "name 'TextDataset' is not defined", (("TextDataset(...)", "TextDataset()"),)),
    Fix("import GradScaler and autocast (called, never imported) from torch.amp",
        "name 'GradScaler' is not defined", (), imports="from torch.amp import GradScaler, autocast\n"),
    Fix("autocast needs its device type (torch.amp)", "device_type",
        (("with autocast():", "with autocast(device.type):"),)),
    # DDP broadcasts rank 0's buffers before every forward (broadcast_buffers=True). pe is a transposed
    # view, shape (max_len, 1, d) with stride max_len*d on its size-1 dimension; the coalesced broadcast's
    # copy back refuses it as overlapping. .contiguous() is a no-op here (size-1 strides do not count);
    # unsqueeze(1) gives the same shape with ordinary strides.
    Fix("build the pe buffer with unsqueeze(1) (DDP's buffer broadcast refuses the transposed view)",
        "single memory location", (),
        model_edits=(("pe = pe.unsqueeze(0).transpose(0, 1)\n", "pe = pe.unsqueeze(1)\n"),)),
    Fix("store self.d_model (forward reads it, __init__ never sets it)", "has no attribute 'd_model'", (),
        model_edits=(("        super().__init__()\n        self.embedding",
                      "        super().__init__()\n        self.d_model = d_model\n        self.embedding"),)),
)

def train_source(n_fixes: int) -> str:
    """§10.2's train() at CPU size with the first ``n_fixes`` fixes applied."""
    src = ARTICLE_TRAIN
    for old, new in SIZES + tuple(e for f in FIXES[:n_fixes] for e in f.edits):
        assert old in src, old  # the article's text is fixed: each edit must apply
        src = src.replace(old, new)
    return src


def prelude(n_fixes: int) -> str:
    """The imports train() runs with: the article's own, plus the import fixes applied so far."""
    from disttutor.lm.article import ARTICLE_IMPORTS

    return ARTICLE_IMPORTS + "".join(f.imports for f in FIXES[:n_fixes])


def model_source(n_fixes: int) -> str:
    """§10.1's model with the model edits of the first ``n_fixes`` fixes."""
    from disttutor.lm.article import ARTICLE_MODEL

    src = ARTICLE_MODEL
    for old, new in (e for f in FIXES[:n_fixes] for e in f.model_edits):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src
