"""FNet Fourier token mixing (Lee-Thorp et al., 2022; §3.4.1 fn. 5, Tables 3.5-3.8's FNET rows).

FNet replaces the whole self-attention sublayer by y = Re(FFT_seq(FFT_hidden(x))): a 2-D discrete
Fourier transform over the sequence and hidden dimensions, keeping the real part. It has no
parameters. Following the paper, there is no output projection either: the base class's W^O is
replaced by the identity, so the sublayer counts 0 weights, and 0 for Table 3.4's Q/K/V (note:
``counting.qkv_parameters`` reads ``output.weight`` and so does not apply to this variant).

The paper's inputs are always padded to the maximum length (512), so its sequence transform is a
512-point DFT. Here the sequence is zero-padded to ``max_len`` before the transform and the first
L outputs are kept, so a sentence's representation does not depend on how much padding its batch
has; ``max_len=None`` transforms over the input's own length instead (exactly fft2(x).real).
The transform runs in float32 (half-precision FFTs are restricted to power-of-two sizes).

FNet has no causal form (every frequency mixes every position) and no cross form: see
:mod:`token_mixing`.
"""

from __future__ import annotations

import torch
from torch import nn

from leanlm.modeling.attention.base import ATTENTION
from leanlm.modeling.attention.token_mixing import DEFAULT_MAX_LEN, TokenMixing


@ATTENTION.register("fnet")
class FNetMixing(TokenMixing):
    # Not in Table 3.4; written in its style: no weights whatever n and d.
    complexity = r"$\mathcal{O}(1)$"
    params_latex = r"$0$"
    params_extra_latex = r"$-3d^2n$"
    supports_causal = False

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True, max_len: int | None = DEFAULT_MAX_LEN):
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias, max_len)
        self.output = nn.Identity()  # FNet has no output projection

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        length, width = x.shape[-2:]
        points = length if self.max_len is None else self.max_len
        spectrum = torch.fft.fftn(x.float(), s=(points, width), dim=(-2, -1))
        return spectrum.real[..., :length, :].to(x.dtype)

    @staticmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        return 0
