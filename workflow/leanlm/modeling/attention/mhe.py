"""Multiple head embeddings attention (MHE, §3.3.2-3.3.4): the thesis's contribution.

SHA's seed projections Q, K, V = X W^{Q,K,V} (eq. 3.4, W in R^{d_m x d_h}) are turned into n heads
by head embeddings e_i^Q, e_i^K, e_i^V in R^{d_h} (eq. 3.5): Q~_i = psi(Q, e_i^Q), and likewise for
K and V; each head then attends (eq. 3.6). psi is computed for all heads at once by broadcasting
the seed (B, 1, L, d_h) against the embeddings (1, n, 1, d_h).

- MHE-ADD: psi(A, b) = A + 1 b^T          (like absolute position embeddings)
- MHE-MUL: psi(A, b) = A ⊙ 1 (b + 1)^T    (like rotary embeddings; +1 so A is not shrunk at init)

Head embeddings are initialised N(0, initializer_range), like BERT's other embeddings: heads start
as small perturbations of SHA (for MHE-MUL, of scaling by 1) and are pulled apart by training.
Extra parameters over SHA: 3nd (Table 3.4).
"""

from __future__ import annotations

import abc

import torch
from torch import nn

from leanlm.modeling.attention.base import ATTENTION
from leanlm.modeling.attention.sha import SingleHeadAttention


class MultiHeadEmbeddingAttention(SingleHeadAttention):
    """SHA's seed projections plus one head embedding per head for each of Q, K and V."""

    complexity = r"$\mathcal{O}(n)$"
    params_latex = r"$3d^2n + 3dn$"
    params_extra_latex = r"$3nd$"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        self.query_head_embeddings = nn.Parameter(torch.empty(self.n_heads, self.head_dim))
        self.key_head_embeddings = nn.Parameter(torch.empty(self.n_heads, self.head_dim))
        self.value_head_embeddings = nn.Parameter(torch.empty(self.n_heads, self.head_dim))
        self.init_extra_parameters(0.02)

    def init_extra_parameters(self, std: float) -> None:
        for e in (self.query_head_embeddings, self.key_head_embeddings, self.value_head_embeddings):
            nn.init.normal_(e, mean=0.0, std=std)

    @abc.abstractmethod
    def psi(self, seed: torch.Tensor, head_embeddings: torch.Tensor) -> torch.Tensor:
        """Combine the seed (B, 1, L, d_h) with head embeddings (1, n, 1, d_h) -> (B, n, L, d_h)."""

    def project(self, x: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().project(x, memory)  # seeds, one head each
        return (self.psi(q, self.query_head_embeddings[None, :, None, :]),
                self.psi(k, self.key_head_embeddings[None, :, None, :]),
                self.psi(v, self.value_head_embeddings[None, :, None, :]))

    @property
    def score_heads(self) -> int:
        return self.n_heads

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        # SHA's seeds plus n head embeddings of size d for each of Q, K and V.
        return 3 * d * d * n + 3 * d * n


@ATTENTION.register("mhe_add")
class MHEAddAttention(MultiHeadEmbeddingAttention):
    """MHE-ADD: psi(A, e_i) = A + e_i."""

    def psi(self, seed: torch.Tensor, head_embeddings: torch.Tensor) -> torch.Tensor:
        return seed + head_embeddings


@ATTENTION.register("mhe_mul")
class MHEMulAttention(MultiHeadEmbeddingAttention):
    """MHE-MUL: psi(A, e_i) = A ⊙ (e_i + 1)."""

    def psi(self, seed: torch.Tensor, head_embeddings: torch.Tensor) -> torch.Tensor:
        return seed * (head_embeddings + 1.0)
