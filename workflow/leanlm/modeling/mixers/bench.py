"""Throughput of ch. 4's mixers: tokens/s of each variant relative to Standard.

    python -m leanlm.modeling.mixers.bench                       # small width, CPU or CUDA
    python -m leanlm.modeling.mixers.bench --d-model 896 --heads 14 --train --out bench.json

Each mixer is timed alone on (batch, L, d) inputs: at L = 2048 for every variant, and at L = 8192
for Approximate and Non-approximate against Standard (the linear variants' case). Inference
(no_grad) by default, forward + backward with ``--train``. RndEmbQK/FixedSeqQK run in their
inference form (fixed (q, k) cached) or, with ``--train``, their training form (fixed row added).
bf16 on CUDA, float32 on CPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import CH4_VARIANTS, MixerContext, build_mixer
from leanlm.modeling.mixers.base import apply_rope, rope_tables

LONG_VARIANTS = ["standard", "approximate", "non_approximate"]


def _inputs(mixer, batch: int, length: int, device, dtype, train: bool):
    fixed = mixer.qk_stream in ("random", "text")
    rows = batch + 1 if fixed and train else batch
    x = torch.randn(rows, length, mixer.d_model, device=device, dtype=dtype, requires_grad=train)
    cos, sin = rope_tables(torch.arange(length, device=device), mixer.head_dim, mixer.rope_theta, dtype)
    ctx = MixerContext(cos=cos, sin=sin)
    if mixer.qk_stream == "embeddings":
        ctx.embeddings = torch.randn(batch, length, mixer.d_model, device=device, dtype=dtype)
    elif fixed and train:
        ctx.fixed_row = True
    elif fixed:
        with torch.no_grad():
            f = torch.randn(1, length, mixer.d_model, device=device, dtype=dtype)
            ctx.fixed_qk = {0: (apply_rope(mixer.project_q(f), cos, sin),
                                apply_rope(mixer.project_k(f), cos, sin))}
    return x, ctx


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tokens_per_second(name: str, d_model: int, heads: int, length: int, batch: int = 1,
                      device: str | torch.device = "cpu", train: bool = False, repeats: int = 3) -> float:
    """Best-of-``repeats`` tokens/s of one mixer forward (and backward with ``train``)."""
    device = torch.device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = ModelConfig(backbone="qwen", vocab_size=256, n_layers=1, d_model=d_model, n_heads=heads,
                         head_dim=d_model // heads, d_ff=4 * d_model, max_position=length,
                         type_vocab_size=0, dropout=0.0, attention_dropout=0.0, attention=name)
    mixer = build_mixer(name, config).to(device=device, dtype=dtype).train(train)
    x, ctx = _inputs(mixer, batch, length, device, dtype, train)
    best = float("inf")
    for i in range(repeats + 1):  # the first run warms up (allocator, kernels)
        _sync(device)
        start = time.perf_counter()
        with torch.set_grad_enabled(train):
            out = mixer(x, ctx)
            if train:
                out.float().square().mean().backward()
        _sync(device)
        if i:
            best = min(best, time.perf_counter() - start)
    return batch * length / best


def run(d_model: int = 256, heads: int = 4, batch: int = 1, length: int = 2048,
        long_length: int = 8192, device: str = "auto", train: bool = False, repeats: int = 3
        ) -> list[dict]:
    """Rows of (variant, length, tokens/s, relative to Standard at the same length)."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    rows = []
    for seq, names in ((length, CH4_VARIANTS), (long_length, LONG_VARIANTS)):
        speeds = {n: tokens_per_second(n, d_model, heads, seq, batch, device, train, repeats) for n in names}
        rows += [{"variant": n, "length": seq, "tokens_per_s": s, "relative": s / speeds["standard"],
                  "device": str(device), "d_model": d_model, "heads": heads, "batch": batch,
                  "mode": "train" if train else "inference"} for n, s in speeds.items()]
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--long-length", type=int, default=8192)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--train", action="store_true", help="time forward + backward")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = run(args.d_model, args.heads, args.batch, args.length, args.long_length, args.device,
               args.train, args.repeats)
    print(f"{'variant':<16}{'L':>6}{'tokens/s':>14}{'vs Standard':>13}   ({rows[0]['device']}, "
          f"d={args.d_model}, h={args.heads}, B={args.batch}, {rows[0]['mode']})")
    for r in rows:
        print(f"{r['variant']:<16}{r['length']:>6}{r['tokens_per_s']:>14,.0f}{r['relative']:>12.2f}x")
    if args.out:
        from leanlm.io import write_json

        write_json(args.out, rows)
    return rows


if __name__ == "__main__":
    main()
