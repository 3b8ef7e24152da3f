"""Throughput of ch. 4's mixers: tokens/s of each variant relative to Standard (and MFU on GPUs).

    python -m leanlm.benchmarks.mixers                       # small width, CPU or CUDA
    python -m leanlm.benchmarks.mixers --d-model 896 --heads 14 --train --out bench.json

Each mixer is timed alone on (batch, L, d) inputs: at L = 2048 for every variant, and at L = 8192
for Approximate and Non-approximate against Standard (the linear variants' case). Inference
(no_grad) by default, forward + backward with ``--train``. RndEmbQK/FixedSeqQK run in their
inference form (fixed (q, k) cached) or, with ``--train``, their training form (fixed row added).
bf16 on CUDA, float32 on CPU.

Timing: the variants of one length are run round-robin, ``repeats`` rounds after a warm-up round,
and each keeps its best time, so a change in machine load (a shared CPU) affects all variants
alike rather than whichever happened to run then.

MFU (on CUDA, or wherever ``peak_tflops`` is given): FLOPs of one forward as
torch.utils.flop_counter counts them (every GEMM; SDPA as the full L x L products, as
leanlm.benchmarks.pretraining's MFU accounting counts attention), times 3 with ``--train`` (backward =
2 forwards; the recomputation of checkpointed parts is not counted), over time and the device's bf16 dense peak
(leanlm.benchmarks.pretraining.peak_flops).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from leanlm.benchmarks.pretraining import peak_flops
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


class Case:
    """One variant at one size, built once and timed many times."""

    def __init__(self, name: str, d_model: int, heads: int, length: int, batch: int,
                 device: torch.device, train: bool):
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        config = ModelConfig(backbone="qwen", vocab_size=256, n_layers=1, d_model=d_model,
                             n_heads=heads, head_dim=d_model // heads, d_ff=4 * d_model,
                             max_position=length, type_vocab_size=0, dropout=0.0,
                             attention_dropout=0.0, attention=name)
        self.name, self.device, self.train, self.tokens = name, device, train, batch * length
        self.mixer = build_mixer(name, config).to(device=device, dtype=dtype).train(train)
        self.x, self.ctx = _inputs(self.mixer, batch, length, device, dtype, train)
        self.best = float("inf")

    def run_once(self) -> float:
        """Seconds of one forward (and backward); keeps the best."""
        _sync(self.device)
        start = time.perf_counter()
        with torch.set_grad_enabled(self.train):
            out = self.mixer(self.x, self.ctx)
            if self.train:
                out.float().square().mean().backward()
        _sync(self.device)
        seconds = time.perf_counter() - start
        self.best = min(self.best, seconds)
        return seconds

    def flops(self) -> int:
        """Counted FLOPs of one step (forward; x3 when training), see the module docstring."""
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            self.mixer(self.x.detach(), self.ctx)
        return counter.get_total_flops() * (3 if self.train else 1)


def time_cases(cases: list[Case], repeats: int = 3) -> dict[str, float]:
    """Tokens/s of each case: one warm-up round, then ``repeats`` round-robin rounds, best kept."""
    for case in cases:
        case.run_once()  # warm-up (allocator, kernels), not kept
        case.best = float("inf")
    for _ in range(repeats):
        for case in cases:
            case.run_once()
    return {case.name: case.tokens / case.best for case in cases}


def tokens_per_second(name: str, d_model: int, heads: int, length: int, batch: int = 1,
                      device: str | torch.device = "cpu", train: bool = False, repeats: int = 3) -> float:
    """Best-of-``repeats`` tokens/s of one mixer forward (and backward with ``train``)."""
    case = Case(name, d_model, heads, length, batch, torch.device(device), train)
    return time_cases([case], repeats)[name]


def _peak(device: torch.device, peak_tflops: float | None) -> float | None:
    if peak_tflops is not None:
        return peak_tflops * 1e12
    if device.type == "cuda":
        return peak_flops(torch.cuda.get_device_name(device))
    return None


def run(d_model: int = 256, heads: int = 4, batch: int = 1, length: int = 2048,
        long_length: int = 8192, device: str = "auto", train: bool = False, repeats: int = 3,
        peak_tflops: float | None = None, variants: list[str] | None = None,
        long_variants: list[str] | None = None) -> list[dict]:
    """Rows of (variant, length, tokens/s, relative to Standard at the same length, MFU or None).

    ``variants``/``long_variants`` default to every ch. 4 variant at ``length`` and
    :data:`LONG_VARIANTS` at ``long_length`` (Standard is always included: the reference).
    """
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    peak = _peak(device, peak_tflops)
    rows = []
    for seq, names in ((length, variants or CH4_VARIANTS), (long_length, long_variants or LONG_VARIANTS)):
        names = ["standard"] + [n for n in names if n != "standard"]
        cases = [Case(n, d_model, heads, seq, batch, device, train) for n in names]
        speeds = time_cases(cases, repeats)
        for case in cases:
            speed = speeds[case.name]
            mfu = case.flops() / case.best / peak if peak else None
            rows.append({"variant": case.name, "length": seq, "tokens_per_s": speed,
                         "relative": speed / speeds["standard"], "mfu": mfu,
                         "device": str(device), "d_model": d_model, "heads": heads, "batch": batch,
                         "mode": "train" if train else "inference"})
        del cases
    return rows


def format_rows(rows: list[dict]) -> str:
    """The printed table: tokens/s, relative to Standard, and MFU where a peak is known."""
    r0 = rows[0]
    lines = [f"{'variant':<16}{'L':>6}{'tokens/s':>14}{'vs Standard':>13}{'MFU':>8}   ({r0['device']}, "
             f"d={r0['d_model']}, h={r0['heads']}, B={r0['batch']}, {r0['mode']})"]
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        lines.append(f"{r['variant']:<16}{r['length']:>6}{r['tokens_per_s']:>14,.0f}"
                     f"{r['relative']:>12.2f}x{mfu:>8}")
    return "\n".join(lines)


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
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="device peak for MFU (default: the GPU's bf16 dense peak; none on CPU)")
    parser.add_argument("--variants", nargs="+", default=None, help="at --length (default: all)")
    parser.add_argument("--long-variants", nargs="+", default=None,
                        help=f"at --long-length (default: {' '.join(LONG_VARIANTS)})")
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = run(args.d_model, args.heads, args.batch, args.length, args.long_length, args.device,
               args.train, args.repeats, args.peak_tflops, args.variants, args.long_variants)
    print(format_rows(rows))
    if args.out:
        from leanlm.io import write_json

        write_json(args.out, rows)
    return rows


if __name__ == "__main__":
    main()
