"""MLP (eqs. 4.4-4.5): a gated SiLU MLP in place of attention, so no token mixing at all.

O = FC_Dn(SiLU(FC_Gt(H)) * FC_Up(H)). Its width w is chosen so that its 3*d*w weights match the
standard attention block's parameters (Q/K/V/O weights, Q/K/V biases, Q/K norms where present) as
closely as an integer width allows (DESIGN §8): w = round(P_attention / (3 d)).

:class:`GatedMLP` (mixers/base.py) is also the Qwen block's own feed-forward (SwiGLU), with width ``d_ff``.
"""

from __future__ import annotations

import torch

from leanlm.modeling.mixers.base import MIXERS, GatedMLP, Mixer, MixerContext
# The width matches Standard's parameters: an MLP model's code includes the Standard mixer's.
from leanlm.modeling.mixers.standard import StandardAttention


def matched_mlp_width(config) -> int:
    """The MLP variant's width: 3*d*w closest to the standard attention block's parameter count,
    counted from an instance built on the meta device (no memory)."""
    with torch.device("meta"):
        reference = StandardAttention(config)
    params = sum(p.numel() for p in reference.parameters())
    return max(1, round(params / (3 * config.d_model)))


@MIXERS.register("mlp")
class MLPMixer(Mixer):
    label = "MLP"
    complexity_latex = r"BLd^2"
    flops_latex = {"prefill": r"6BLd^2", "decode": r"6Bd^2"}
    activation_latex = r"8BLd/t"
    cache_latex = r"0"

    def __init__(self, config, layer_idx: int = 0):
        super().__init__(config, layer_idx)
        self.width = matched_mlp_width(config)
        self.mlp = GatedMLP(config.d_model, self.width)

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        return self.mlp(h)

    def prefill(self, h, ctx):
        return self.mlp(h), {}

    def step(self, h_t, state, ctx=None):
        return self.mlp(h_t), state

    @staticmethod
    def complexity(B, L, d, h):
        return B * L * d * d

    @staticmethod
    def flops(B, L, d, h, stage="prefill"):
        return 6 * B * L * d * d if stage == "prefill" else 6 * B * d * d

    @staticmethod
    def activation_memory(B, L, d, h, t=1):
        return 8 * B * L * d / t

    @staticmethod
    def cache_size(B, L, d, h):
        return 0
