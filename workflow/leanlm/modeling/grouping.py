"""Grouped-query attention's key/value heads (GQA, Ainslie et al. 2023), written once for ch. 3 and ch. 4.

With ``n_kv_heads`` key/value heads for ``n_heads`` query heads, each key/value head serves a group of
``n_heads / n_kv_heads`` consecutive query heads (1 key/value head: MQA; ``n_heads``: MHA). Ch. 3's ``gqa``
attention (modeling/attention/gqa.py) and ch. 4's projected token mixers (Qwen's GQA, modeling/mixers/base.py)
validate the option with :func:`check_kv_heads` and attend with :func:`grouped_attention` (SDPA broadcasts
the groups itself, no copy) or, on paths that are not SDPA, :func:`repeat_kv`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from leanlm.errors import ConfigError


def check_kv_heads(variant: str, n_heads: int, n_kv_heads: int, where: str = "model config",
                   required: bool = False) -> None:
    """ConfigError naming ``variant`` unless ``n_kv_heads`` divides ``n_heads`` (0: unset, i.e. MHA, allowed
    unless ``required``)."""
    if not n_kv_heads:
        if required:
            raise ConfigError(f"{where}: {variant} needs n_kv_heads, its number of key/value heads (a divisor of "
                              f"n_heads={n_heads}; n_heads itself would be plain 'mha')")
        return
    if n_heads % n_kv_heads:
        raise ConfigError(f"{where}: {variant}: n_kv_heads={n_kv_heads} must divide n_heads={n_heads} "
                          f"(grouped-query attention: each key/value head serves n_heads / n_kv_heads query heads)")


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **sdpa: object) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` over (B, heads, L, d_h) tensors whose keys/values may have fewer
    heads than the queries (a divisor of them): each serves its group of query heads."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=k.size(1) != q.size(1), **sdpa)


def repeat_kv(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, kv, L, d_h) -> (B, n_heads, L, d_h): each key/value head serves n_heads/kv query heads
    (GQA), for the paths that are not SDPA (which broadcasts groups itself)."""
    kv = t.size(1)
    if kv == n_heads:
        return t
    return t.repeat_interleave(n_heads // kv, dim=1)
