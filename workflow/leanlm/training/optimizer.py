"""The engine's optimizer: AdamW over two parameter groups (decayed matrices, undecayed 1-D parameters)."""

from __future__ import annotations

import torch
from torch import nn


def adamw_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed matrices and undecayed 1-D parameters.

    No weight decay on biases, LayerNorm/RMSNorm weights or any other parameter with fewer than two
    dimensions (scales, gates): decaying them pulls normalisation gains towards 0, which only hurts.
    Weight matrices and embeddings are decayed, as in BERT and the HF Trainer the thesis used.
    Frozen parameters (``requires_grad=False``) are left out.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def adamw(model: nn.Module, config, fused: bool) -> torch.optim.AdamW:
    """AdamW with the run's ``lr``, ``adam_betas``, ``adam_eps`` and ``weight_decay`` (``TrainConfig``)."""
    return torch.optim.AdamW(adamw_param_groups(model, config.weight_decay), lr=config.lr,
                             betas=config.adam_betas, eps=config.adam_eps, fused=fused)
