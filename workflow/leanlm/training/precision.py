"""The precision a run computes its forward passes in (``TrainConfig.precision``): bf16 autocast on an
accelerator that has it, fp32 elsewhere or when asked; the engine's training step and evaluation, and the
tests that train a step exactly as it does, enter the same context."""

from __future__ import annotations

import contextlib

import torch

from leanlm.errors import ConfigError


def training_autocast(precision: str, device: torch.device):
    """The context a run with ``precision`` computes its forward passes in on ``device``, as the
    Trainer does: bf16 autocast, or no autocast for fp32 (tests train a step exactly this way)."""
    return autocast_to(autocast_dtype(precision, device), device)


def autocast_to(dtype: torch.dtype | None, device: torch.device):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            f"precision={precision!r} needs bf16, which {torch.cuda.get_device_name(device)} lacks; "
            "set precision: fp32"
        )
    return torch.bfloat16
