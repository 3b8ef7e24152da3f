"""Several projections of one input in one GEMM: the Q, K and V of a self-attention.

Attention projects the same input three times. One GEMM of the three weights stacked reads the input
once and launches one kernel instead of three, with the very outputs of the three (each output column
is the same dot product).

The parameters stay separate ``nn.Linear`` modules under BERT's and Qwen2's names (``query``/``key``/
``value``, ``q_proj``/``k_proj``/``v_proj``), so state_dict keys, checkpoints, the Hugging Face export,
parameter counting and every test that copies weights between models are unchanged; the weights are
stacked at each call instead. Fusing the parameters themselves (one ``qkv`` matrix, with state-dict hooks
splitting it into the three names) would rename every parameter inside the process, and on the 2-core
CPU it measured within noise of both the stacked and the separate form (docs/benchmarks.md).

When: the stacked weight is a tensor autograd saves for the backward, where separate projections save
the parameters themselves. Under autocast that costs nothing more (each projection saves its bf16 cast
of the weight anyway, now one stacked cast instead of three), and under torch.compile the compiler plans
the memory; in plain eager float32 it would hold a copy of 3 d_m^2 weights per layer until the backward,
for a speed measured within noise on the CPU. So the projections are joined under autocast or when
compiled (the GPU's paths) and stay separate otherwise (float32, float64 and whole-bf16 models compute
exactly as before).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def joins(x: torch.Tensor) -> bool:
    """Whether :func:`joint_linear` stacks the weights for input ``x``: when compiled or under autocast."""
    device = x.device.type
    return torch.compiler.is_compiling() or (torch.amp.is_autocast_available(device)
                                             and torch.is_autocast_enabled(device))


def joint_linear(x: torch.Tensor, *linears: nn.Linear) -> tuple[torch.Tensor, ...]:
    """``tuple(linear(x) for linear in linears)``; one GEMM when :func:`joins` (the outputs are then
    views of one tensor: a caller that keeps one of them alone may want its own copy)."""
    biases = [linear.bias for linear in linears]
    if not joins(x) or len(linears) == 1 or len({b is None for b in biases}) > 1:
        return tuple(linear(x) for linear in linears)
    weight = torch.cat([linear.weight for linear in linears])
    bias = None if biases[0] is None else torch.cat(biases)
    return F.linear(x, weight, bias).split([linear.out_features for linear in linears], dim=-1)
