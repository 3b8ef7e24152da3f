"""Grouped-query attention (GQA, Ainslie et al. 2023): per-head queries, ``n_kv_heads`` key/value heads.

Between MHA (n key/value heads) and MQA (one): W^Q in R^{d_m x n d_h} as MHA's, W^K and W^V in
R^{d_m x g d_h} for g = ``n_kv_heads`` heads, each serving n/g consecutive query heads (the grouping is
leanlm.modeling.grouping's, shared with ch. 4's Standard mixer). Not in the thesis: the worked example of
docs/extending.md, one file and no other code change. Q/K/V weights: d^2 n^2 + 2 d^2 n g.

Option: ``n_kv_heads`` (a ModelConfig field), which must divide ``n_heads``; the config is refused before any
job when it does not, or when it is unset (that would be MHA under another name).
"""

from __future__ import annotations

from leanlm.modeling.attention.base import ATTENTION, Attention
from leanlm.modeling.grouping import check_kv_heads


@ATTENTION.register("gqa")
class GroupedQueryAttention(Attention):
    complexity = r"$\mathcal{O}(n^2)$"
    params_latex = r"$d^2n^2 + 2d^2ng$"
    params_extra_latex = r"$(n^2 + 2ng - 3n)d^2$"
    options = ("n_kv_heads",)

    @classmethod
    def check_config(cls, config, where: str = "model config") -> None:
        check_kv_heads("attention 'gqa'", config.n_heads, config.n_kv_heads, where, required=True)

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True, n_kv_heads: int = 1):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        check_kv_heads("attention 'gqa'", self.n_heads, n_kv_heads, f"{type(self).__name__}", required=True)
        self.n_kv_heads = int(n_kv_heads)
        self.query = self.linear(self.d_model, self.n_heads * self.head_dim)
        # g heads' width: the default project() then yields (B, g, L, d_h) keys and values.
        self.key = self.linear(self.d_model, self.n_kv_heads * self.head_dim)
        self.value = self.linear(self.d_model, self.n_kv_heads * self.head_dim)

    @staticmethod
    def qkv_parameter_formula(n: int, d: int, g: int = 1) -> int:
        # W^Q is (n*d) x (n*d); W^K and W^V are (n*d) x (g*d) each.
        return d * d * n * n + 2 * d * d * n * g
