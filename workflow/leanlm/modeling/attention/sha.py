"""Single-head attention (SHA, §3.4.1), the lower bound MHE starts from.

One d_h-dimensional head with seed projections W^{Q,K,V} in R^{d_m x d_h} (eq. 3.4). As the
thesis counts it (Table 3.13: 737,280 weights per BERT-base block; DESIGN §8), the head's output
fills all n head slots, so the output projection stays d_m x d_m: the one head is computed once and
its output is broadcast over the slots, never recomputed per slot.
"""

from __future__ import annotations

import torch

from leanlm.modeling.attention.base import ATTENTION, Attention


@ATTENTION.register("sha")
class SingleHeadAttention(Attention):
    complexity = r"$\mathcal{O}(n)$"
    params_latex = r"$3d^2n$"
    params_extra_latex = r"$0$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        # The "seed" projections: one head's worth, shared by every head slot.
        self.query = self.linear(self.d_model, self.head_dim)
        self.key = self.linear(self.d_model, self.head_dim)
        self.value = self.linear(self.d_model, self.head_dim)

    def merge_heads(self, heads: torch.Tensor) -> torch.Tensor:
        # (B, 1, L, d_h) -> the same head in all n slots; a no-op for variants that made n heads.
        return super().merge_heads(heads.expand(-1, self.n_heads, -1, -1))

    @property
    def score_heads(self) -> int:
        return 1

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # Three n*d x d seed matrices.
        return 3 * d * d * n
