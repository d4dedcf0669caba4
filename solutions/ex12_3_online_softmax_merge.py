"""Exercise 12.3 (chapter 12): merge two partial attentions (the online softmax of ring attention).

out_a [..., queries, d] is softmax attention over key block A, lse_a [..., queries] the log of its
softmax denominator (log-sum-exp of the scores); the same for block B. Return the attention over
A and B together, and its log-sum-exp.
"""
import torch


def merge(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)                   # log(e^lse_a + e^lse_b), overflow-free
    ref = lse.masked_fill(torch.isneginf(lse), 0.0)       # both blocks empty: weights 0, not nan
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)            # block A's share of the denominator
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, lse
