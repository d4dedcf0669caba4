"""Model shapes for the planner: parameters and training FLOPs per token of a decoder Transformer.

Introduced in chapter 13 (at scale). Llama-style (gated SwiGLU MLP, grouped-query attention,
untied embeddings, no biases) and GPT-style (4h MLP, biases, learned positions, tied embeddings:
exactly chapter 1's :func:`disttutor.sharding.memory.transformer_params`). Shapes of Llama 3 are *reported*
(the Llama 3 paper, Table 3: layers, model dimension, FFN dimension, heads, key/value heads; the
vocabulary, 128,256, is the released models' ``config.json``: Table 3 prints 128,000); everything
computed from them is *derived*.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int = 0            # 0: 4 * hidden
    kv_heads: int = 0       # 0: heads (no grouped-query attention)
    gated: bool = False     # SwiGLU: three ffn matrices instead of two
    tied: bool = True       # output layer shares the token embedding
    gpt_params: int = 0     # > 0: the exact GPT count of chapter 1 (biases, norms, positions)

    def __post_init__(self):
        for k in ("layers", "hidden", "heads", "vocab"):
            if isinstance(getattr(self, k), bool) or not isinstance(getattr(self, k), int) or getattr(self, k) < 1:
                raise ValueError(f"ModelShape.{k} must be a positive integer, got {getattr(self, k)!r}")
        for k in ("ffn", "kv_heads", "gpt_params"):
            if isinstance(getattr(self, k), bool) or not isinstance(getattr(self, k), int) or getattr(self, k) < 0:
                raise ValueError(f"ModelShape.{k} must be an integer >= 0 (0: the default), got {getattr(self, k)!r}")
        if self.hidden % self.heads:
            raise ValueError(f"ModelShape.hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv:
            raise ValueError(f"ModelShape.kv_heads ({self.kv}) must divide heads ({self.heads})")

    @property
    def ff(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        """Matrices of one block: Q and output ``2h^2``, K and V ``2 h kv d``, MLP ``(2 or 3) h ffn``."""
        attn = 2 * self.hidden**2 + 2 * self.hidden * self.kv * self.head_dim
        return attn + (3 if self.gated else 2) * self.hidden * self.ff

    def matmul_outputs(self) -> list[int]:
        """Widths of one block's matmul outputs per token, in forward order: Q, K, V, output projection,
        then the MLP's (gated: gate, up, down; else up, down)."""
        kvd = self.kv * self.head_dim
        mlp = [self.ff, self.ff, self.hidden] if self.gated else [self.ff, self.hidden]
        return [self.hidden, kvd, kvd, self.hidden] + mlp

    def params(self) -> int:
        if self.gpt_params:
            return self.gpt_params
        return self.layers * self.layer_params() + (1 if self.tied else 2) * self.vocab * self.hidden

    def flops_per_token(self, seq: int) -> float:
        """Training FLOPs per token: ``6 x`` the matmul parameters (the input embedding is a lookup)
        plus attention's scores and values, ``12 L h s`` (the PaLM paper's count, Appendix B:
        no causal-mask discount)."""
        matmul = self.layers * self.layer_params() + self.vocab * self.hidden
        return 6.0 * matmul + self.attention_flops_per_token(seq)

    def attention_flops_per_token(self, seq: int) -> float:
        """Attention's scores and values, forward and backward: ``12 L h s`` (a third of it forward)."""
        return 12.0 * self.layers * self.hidden * seq


def gpt(layers: int, hidden: int, heads: int, vocab: int = 50257, max_seq: int = 1024) -> ModelShape:
    """A GPT shape whose parameter count is chapter 1's calculator's, to the parameter."""
    from disttutor.sharding.memory import transformer_params

    return ModelShape(f"GPT {layers}x{hidden}", layers, hidden, heads, vocab,
                      gpt_params=transformer_params(layers, hidden, vocab, max_seq))


LLAMA3_8B = ModelShape("Llama 3 8B", 32, 4096, 32, 128256, ffn=14336, kv_heads=8, gated=True, tied=False)
LLAMA3_70B = ModelShape("Llama 3 70B", 80, 8192, 64, 128256, ffn=28672, kv_heads=8, gated=True, tied=False)
LLAMA3_405B = ModelShape("Llama 3 405B", 126, 16384, 128, 128256, ffn=53248, kv_heads=8, gated=True, tied=False)
SHAPES = {s.name: s for s in (LLAMA3_8B, LLAMA3_70B, LLAMA3_405B)}
SHAPE_SOURCE = ("reported: Llama 3 paper (arXiv 2407.21783) Table 3 -- layers 32/80/126, model dimension "
                "4,096/8,192/16,384, FFN 14,336/28,672/53,248, heads 32/64/128, KV heads 8; "
                "vocabulary 128,256 from the released models' config.json (Table 3 prints 128,000)")
