"""The attention mask a backbone hands its layers: the batch's, or None when it pads nothing."""

from __future__ import annotations

import torch


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``attention_mask`` (B, L; 1 = token, 0 = padding), or None when it masks nothing, so that SDPA
    takes its mask-free path (``is_causal`` in decoders: the fastest kernels).

    Finding out reads the mask on the host: in eager mode a device sync per forward, under torch.compile
    a graph break that would split the compiled model in two. Compiled, the mask is therefore kept as it
    is: a mask of ones masks nothing, so the result is the same, and the model stays one graph.
    Pretraining batches (packed rows) carry no mask at all, so they take the mask-free path either way.
    """
    if attention_mask is None or torch.compiler.is_compiling():
        return attention_mask
    return None if bool(attention_mask.all()) else attention_mask
