"""Throughput of one MLM pretraining step (forward + backward + AdamW) of BertForMLM.

``run_bench`` times ``steps`` optimiser steps on one fixed random batch (data loading excluded;
warm-up steps excluded from the clock; CUDA synchronised before the clock is read) and reports
tokens/s, ms/step and, on GPUs, model FLOPs utilisation (MFU).

FLOPs per token (forward + backward), following Kaplan et al. (2020) / PaLM's MFU accounting::

    6 * N  +  12 * n_layers * seq_len * h * d_h

where N is the number of non-embedding parameters (every matmul weight costs 2 FLOPs per token
forward and 4 backward) and the second term is the attention scores and their weighted sum
(QK^T and AV: 2 * 2 * L * h * d_h forward per token and layer, times 3 for backward). h is the number
of attention maps the variant actually computes (``score_heads``): n for MHA/MHE, 1 for SHA.
The vocabulary projection, which here runs only at the ~15% masked positions and reuses the
embedding matrix, is not counted, nor are norms, activations and softmax: MFU is a lower bound.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import (
    attention_blocks,
    model_attention_parameters,
    non_embedding_parameters,
    total_parameters,
)
from leanlm.modeling.heads import IGNORE_INDEX, BertForMLM

# Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, matched as substrings of
# torch.cuda.get_device_name(); more specific names first ("H100 PCIe" before "H100").
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
)

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}


def peak_flops(device_name: str) -> float | None:
    """The bf16 dense peak of a GPU by name, or None when it is not in the table."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def flops_per_token(model: BertForMLM, seq_len: int) -> int:
    """Training FLOPs per token of ``model`` at ``seq_len`` (module docstring has the formula)."""
    # Summed over blocks, so per-layer mixes of variants are counted layer by layer.
    score_heads = sum(block.score_heads for block in attention_blocks(model))
    return 6 * non_embedding_parameters(model) + 12 * seq_len * score_heads * model.config.head_dim


def _resolve(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} asked for, but torch sees no CUDA device")
    if dtype == "auto":
        dtype = "bfloat16" if dev.type == "cuda" else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is unknown; use one of {sorted(DTYPES)} or 'auto'")
    return dev, DTYPES[dtype]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_bench(size: str = "base", attention: str = "mha", batch_size: int = 32, seq_len: int = 128,
              steps: int = 20, device: str = "auto", dtype: str = "auto", *, warmup: int = 3,
              mask_prob: float = 0.15, compile: bool = False, seed: int = 0) -> dict[str, Any]:
    """Time MLM pretraining steps of a ``size`` model with ``attention``; returns the measurements.

    ``dtype`` is the autocast dtype (bf16 by default on CUDA, fp32 on CPU); weights and AdamW
    states stay fp32, as in mixed-precision training.
    """
    if steps < 1 or warmup < 0 or batch_size < 1 or seq_len < 2:
        raise ConfigError(f"bench needs steps>=1, warmup>=0, batch_size>=1, seq_len>=2; got "
                          f"steps={steps}, warmup={warmup}, batch_size={batch_size}, seq_len={seq_len}")
    dev, amp_dtype = _resolve(device, dtype)
    config = ModelConfig.preset(size, attention=attention, dropout=0.1, attention_dropout=0.1)
    if seq_len > config.max_tokens:
        raise ConfigError(f"seq_len={seq_len} exceeds size {size!r}'s {config.max_tokens} positions")
    torch.manual_seed(seed)
    model = BertForMLM(config).to(dev).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  fused=dev.type == "cuda")
    step_model = torch.compile(model) if compile else model

    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, config.vocab_size, (batch_size, seq_len), generator=gen)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    masked = torch.rand(batch_size, seq_len, generator=gen) < mask_prob
    masked[:, 1] = True  # at least one target per row, so no step has an empty loss
    labels[masked] = input_ids[masked]
    input_ids, labels = input_ids.to(dev), labels.to(dev)
    use_amp = amp_dtype != torch.float32

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=use_amp):
            loss = step_model(input_ids, labels=labels)["loss"]
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(warmup):
        step()
    _synchronize(dev)
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    _synchronize(dev)
    elapsed = time.perf_counter() - start

    tokens_per_s = batch_size * seq_len * steps / elapsed
    fpt = flops_per_token(model, seq_len)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = peak_flops(device_name) if dev.type == "cuda" else None
    return {
        "size": size,
        "attention": attention,
        "device": device_name,
        "dtype": str(amp_dtype).removeprefix("torch."),
        "batch_size": batch_size,
        "seq_len": seq_len,
        "steps": steps,
        "warmup": warmup,
        "compile": compile,
        "tokens_per_s": tokens_per_s,
        "step_ms": 1000.0 * elapsed / steps,
        "flops_per_token": fpt,
        "peak_flops": peak,
        "mfu": fpt * tokens_per_s / peak if peak else None,
        "params": total_parameters(model),
        "non_embedding_params": non_embedding_parameters(model),
        "attention_params": model_attention_parameters(model),
        "final_loss": float(loss.detach()),
    }


def format_report(result: dict[str, Any]) -> str:
    """A few readable lines of a :func:`run_bench` result."""
    mfu = f"{100 * result['mfu']:.1f}%" if result.get("mfu") is not None else "n/a (no GPU peak known)"
    return "\n".join([
        f"MLM step, size={result['size']} attention={result['attention']} on {result['device']} "
        f"({result['dtype']}{', compiled' if result.get('compile') else ''})",
        f"  batch {result['batch_size']} x seq {result['seq_len']}, {result['steps']} timed steps "
        f"after {result['warmup']} warm-up",
        f"  {result['tokens_per_s']:,.0f} tokens/s, {result['step_ms']:.1f} ms/step, MFU {mfu}",
        f"  {result['flops_per_token'] / 1e6:,.2f} MFLOP/token; params {result['params']:,} "
        f"(non-embedding {result['non_embedding_params']:,}, attention {result['attention_params']:,})",
        f"  final loss {result['final_loss']:.3f}",
    ])
