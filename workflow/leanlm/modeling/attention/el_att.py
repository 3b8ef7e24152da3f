"""EL-ATT (Yan et al., 2021; §3.4.1): keys and values are the input itself, only queries are projected.

"This attention variant completely eliminates the projection matrices for all keys and values":
K = V = the memory's hidden states split into n heads of d_h (so d_m must equal n * d_h), while
queries keep MHA's per-head projection W^Q in R^{d_m x n d_h}. Q/K/V weights: d_m^2 = d^2 n^2
(Table 3.4); with the d_m x d_m output projection, 2 d_m^2 per block (Table 3.13: 1,179,648 at
BERT-base). There are no key or value parameters at all, biases included.
"""

from __future__ import annotations

import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention.base import ATTENTION, Attention


@ATTENTION.register("el_att")
class ELAttention(Attention):
    complexity = r"$\mathcal{O}(n^2)$"
    params_latex = r"$d^2n^2$"
    params_extra_latex = r"$(n^2 - 3n)d^2$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        if self.n_heads * self.head_dim != self.d_model:
            # Keys/values are the hidden states cut into heads: the widths must agree exactly.
            raise ConfigError(
                f"attention 'el_att' splits the d_model={self.d_model} hidden states into n_heads="
                f"{self.n_heads} key/value heads of head_dim={self.head_dim}, which needs d_model == "
                f"n_heads * head_dim; set head_dim to {self.d_model // self.n_heads} or change n_heads"
            )
        self.query = self.linear(self.d_model, self.d_model)

    def project(self, x: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        heads = self.split_heads(memory)  # a view of the input: K and V are the same tensor
        return self.split_heads(self.query(x)), heads, heads

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # W^Q only: one (n*d) x (n*d) matrix.
        return d * d * n * n
