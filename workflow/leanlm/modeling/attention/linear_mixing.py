"""Linear token mixing (Lee-Thorp et al., 2022; §3.4.1 fn. 5, Tables 3.5-3.8's LINEAR rows).

The FNet paper's Linear baseline replaces the self-attention sublayer by two learned dense
matrices, one along the hidden dimension and one along the sequence: y = W_seq x W_hidden.
W_hidden (d_m x d_m) is the base class's output projection ``output`` (same shape and place; its
bias follows the sublayer's bias setting), so it is counted where W^O is, and Table 3.4's
convention ("the last projection ... is excluded") leaves W_seq: ``max_len``^2 weights, which
depends on the sequence length, not on n or d (``qkv_parameter_formula`` takes ``max_len`` as an
optional third argument, defaulting to 512).

W_seq is sized by ``max_len`` (from a model config: its longest input, ``config.max_tokens``); a sequence of
L <= max_len tokens uses its top-left L x L block, which is exactly mixing the sequence zero-padded
to max_len and keeping the first L outputs (the paper always pads to the maximum length).
W_seq is initialised N(0, std) like the model's linear weights (the paper's code uses 0.02).

Causal form: a lower-triangular W_seq (position i mixes positions j <= i only). There is no cross
form: see :mod:`token_mixing`.
"""

from __future__ import annotations

import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.attention.base import ATTENTION
from leanlm.modeling.attention.token_mixing import DEFAULT_MAX_LEN, TokenMixing


@ATTENTION.register("linear")
class LinearMixing(TokenMixing):
    # Not in Table 3.4; written in its style, L being max_len.
    complexity = r"$\mathcal{O}(1)$"
    params_latex = r"$L^2$"
    params_extra_latex = r"$L^2 - 3d^2n$"
    supports_causal = True

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True, max_len: int = DEFAULT_MAX_LEN):
        if max_len is None:
            raise ConfigError("attention 'linear' needs max_len (the model's longest input) to size "
                              "its sequence-mixing matrix; pass max_len=config.max_tokens")
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias, max_len)
        self.sequence_mixing = nn.Parameter(torch.empty(self.max_len, self.max_len))
        self.init_extra_parameters(0.02)

    def init_extra_parameters(self, std: float) -> None:
        nn.init.normal_(self.sequence_mixing, mean=0.0, std=std)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        length = x.size(-2)
        weights = self.sequence_mixing[:length, :length]
        if self.causal:
            weights = weights.tril()
        # (L, L) @ (B, L, d_m) broadcasts over the batch; then W_hidden.
        return self.output(torch.matmul(weights, x))

    @staticmethod
    def qkv_parameter_formula(n: int, d: int, max_len: int = DEFAULT_MAX_LEN) -> int:
        return max_len * max_len
