"""Shared key-value attention (SKV, §3.4.1, after Kitaev et al. 2020): K and V from ONE projection.

As the thesis describes it, "keys and values share the same projection matrix within each attention
module": W^{KV} in R^{d_m x n d_h} is one nn.Linear whose output serves as both the keys and the
values of all n heads (the same tensor is passed twice, not recomputed or copied), while queries
keep their own per-head projection. Q/K/V weights: 2 d^2 n^2 (Table 3.4); 1,769,472 per BERT-base
block with W^O (Table 3.13). (Reformer itself shares queries with keys; the thesis's SKV, and its
counts, share keys with values, and that is what is built here.)
"""

from __future__ import annotations

import torch

from leanlm.modeling.attention.base import ATTENTION, Attention
from leanlm.modeling.joint_linear import joint_linear


@ATTENTION.register("skv")
class SKVAttention(Attention):
    complexity = r"$\mathcal{O}(n^2)$"
    params_latex = r"$2d^2n^2$"
    params_extra_latex = r"$(2n^2 - 3n)d^2$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        inner = self.n_heads * self.head_dim
        self.query = self.linear(self.d_model, inner)
        self.key_value = self.linear(self.d_model, inner)

    def project(self, x: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if memory is x:  # self-attention: queries and the shared keys/values in one GEMM
            q, kv = joint_linear(x, self.query, self.key_value)
        else:
            q, kv = self.query(x), self.key_value(memory)
        kv = self.split_heads(kv)
        return self.split_heads(q), kv, kv

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # W^Q and the shared W^{KV}, each (n*d) x (n*d).
        return 2 * d * d * n * n
