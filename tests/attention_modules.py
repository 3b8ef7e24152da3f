"""Small attention modules and inputs shared by the attention tests (chapter 3's and §3.3's MHE):
one width for all of them, and non-zero biases so a bias applied in the wrong place shows."""

from __future__ import annotations

import torch

from leanlm.modeling.attention import build_attention

D_MODEL, N_HEADS, HEAD_DIM = 32, 4, 8


def make(name: str, **kw):
    """The registered variant ``name`` at the shared width, seeded, in eval mode, biases ~N(0, 0.1)."""
    torch.manual_seed(0)
    module = build_attention(name, d_model=D_MODEL, n_heads=N_HEADS, head_dim=HEAD_DIM, **kw)
    with torch.no_grad():
        for n, p in module.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.1)
    return module.eval()


def inputs(batch=2, length=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, D_MODEL, generator=g)
