"""Multi-head attention (MHA, §3.3.1): one projection per head for each of Q, K and V.

Eq. 3.1-3.3: Q_i, K_i, V_i = X W_i^{Q,K,V} with W_i in R^{d_m x d_h}; the n per-head matrices are
stored side by side as one d_m x n*d_h matrix each, so all heads are projected in one matmul.
This is BERT's self-attention, parameter for parameter.
"""

from __future__ import annotations

from leanlm.modeling.attention.base import ATTENTION, Attention


@ATTENTION.register("mha")
class MultiHeadAttention(Attention):
    complexity = r"$\mathcal{O}(n^2)$"
    params_latex = r"$3d^2n^2$"
    params_extra_latex = r"$(3n^2 - 3n)d^2$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        inner = self.n_heads * self.head_dim
        self.query = self.linear(self.d_model, inner)
        self.key = self.linear(self.d_model, inner)
        self.value = self.linear(self.d_model, inner)

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # Three n*d x n*d matrices (d_m = n*d).
        return 3 * d * d * n * n
