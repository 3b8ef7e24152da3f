"""Multi-query attention (MQA, Shazeer 2019; §3.4.1): per-head queries, ONE key and ONE value head.

Queries keep MHA's n per-head projections (W^Q in R^{d_m x n d_h}); the key and value projections
are a single d_h-wide head each (W^K, W^V in R^{d_m x d_h}), shared by every query head. The
shared head is never copied: the base class broadcasts a one-head tensor over the n query heads
as a stride-0 view. Q/K/V weights: d^2 n^2 + 2 d^2 n (Table 3.4); 1,277,952 per BERT-base block
with W^O (Table 3.13).
"""

from __future__ import annotations

from leanlm.modeling.attention.base import ATTENTION, Attention


@ATTENTION.register("mqa")
class MQAttention(Attention):
    complexity = r"$\mathcal{O}(n^2)$"
    params_latex = r"$d^2n^2 + 2d^2n$"
    params_extra_latex = r"$(n^2 - n)d^2$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        self.query = self.linear(self.d_model, self.n_heads * self.head_dim)
        # One head's width: the default project() then yields (B, 1, L, d_h) keys and values.
        self.key = self.linear(self.d_model, self.head_dim)
        self.value = self.linear(self.d_model, self.head_dim)

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # W^Q is (n*d) x (n*d); W^K and W^V are (n*d) x d each.
        return d * d * n * n + 2 * d * d * n
