"""Tables 4.5-4.8 (appendices E-H): each variant's printed formula, its value at a tested size, and
the same quantity measured on an instantiated mixer.

Measurements (one mixer, B sequences of L tokens, width d, h heads of d/h):

- FLOPs: torch.utils.flop_counter.FlopCounterMode (GEMMs, and attention through SDPA's math
  backend so it is counted: the full L x L, as the formulas count it), without the d x d output
  projection W^O, which every attention variant shares and the formulas leave out. Prefill: one
  forward over L tokens; decode: one ``step`` after a prefill of L-1 tokens (L keys). RndEmbQK and
  FixedSeqQK are measured in their inference form, with the fixed stream's (q, k) cached.
- Activation memory: bytes of the distinct tensors autograd saves for backward during a bf16
  training forward (parameters excluded; views of one storage counted once; SDPA's math backend).
  RndEmbQK/FixedSeqQK in their training form (the fixed row beside the batch). t = 1.
- Cache: bytes of the bf16 decoding state after a prefill of L tokens (``Mixer.cache_bytes``).

``ratio`` = measured / formula. Where it is not 1 the frame's ``note`` says why (the formulas are
leading-order and assume one d x d state for the linear variants; Approx. is measured both in its
default joint form and in the appendix's per-term form the formulas describe).
"""

from __future__ import annotations

from functools import lru_cache

import pandas as pd
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import CH4_VARIANTS, MIXERS, MixerContext, build_mixer
from leanlm.modeling.mixers.base import apply_rope, rope_tables

# B, L, d, h of the measurement: d_h = 64 as in the thesis's 70M-500M models.
TEST_SIZE = {"B": 2, "L": 128, "d": 256, "h": 4}
# Rows: the thesis's seven variants, plus the appendix form of Approx. the formulas describe.
ROWS = CH4_VARIANTS[:3] + ["approximate_per_term"] + CH4_VARIANTS[3:]

NOTES = {
    "mlp": "width w = round((4d^2+3d)/3d) matches attention's parameters: GEMMs 6BLdw ~ 8BLd^2",
    "approximate": "default joint (Based) form: (d_h+1)(d_h+2)/2 features per head (each product once, "
                   "a constant 1 folding the linear terms in); the formulas "
                   "describe the appendix form",
    "approximate_per_term": "appendix form; GEMMs beyond QKV scale as d^2/h (the formula's at h=2)",
    "non_approximate": "stable chunked parallel form: extra O(BLCd) GEMMs, saves C x C chunk "
                       "weights (C=64)",
    "rnd_emb_qk": "inference form: the fixed (q, k) are cached, so no 4BLd^2 (decode 4Bd^2) "
                  "of Q/K projections",
    "fixed_seq_qk": "inference form: the fixed (q, k) are cached, so no 4BLd^2 (decode 4Bd^2) "
                    "of Q/K projections",
}


def _label(name: str) -> str:
    return "Approx. (appendix)" if name == "approximate_per_term" else MIXERS.get(name).label


def _config(name: str, d: int, h: int, L: int) -> ModelConfig:
    return ModelConfig(backbone="qwen", vocab_size=256, n_layers=1, d_model=d, n_heads=h,
                       head_dim=d // h, d_ff=4 * d, max_position=L, type_vocab_size=0, dropout=0.0,
                       attention_dropout=0.0, layer_norm_eps=1e-6, attention=name)


def _context(mixer, length: int, batch: int, like: torch.Tensor, fixed_row: bool = False
             ) -> MixerContext:
    """RoPE tables, and the inputs some variants need, random but of the right shapes."""
    cos, sin = rope_tables(torch.arange(length), mixer.head_dim, mixer.rope_theta, like.dtype)
    ctx = MixerContext(cos=cos, sin=sin, layer=0)
    if mixer.qk_stream == "embeddings":
        ctx.embeddings = torch.randn(batch, length, mixer.d_model, dtype=like.dtype)
    elif mixer.qk_stream in ("random", "text"):
        if fixed_row:
            ctx.fixed_row = True
        else:
            with torch.no_grad():
                x = torch.randn(1, length, mixer.d_model, dtype=like.dtype)
                ctx.fixed_qk = {0: (apply_rope(mixer.project_q(x), cos, sin),
                                    apply_rope(mixer.project_k(x), cos, sin))}
    return ctx


class _Step(nn.Module):
    """Calls ``mixer.step`` as a module, so FlopCounterMode names W^O inside it (mixer.o_proj)."""

    def __init__(self, mixer):
        super().__init__()
        self.mixer = mixer

    def forward(self, *args):
        return self.mixer.step(*args)


def _flops_without_output(counter: FlopCounterMode) -> int:
    counts = counter.get_flop_counts()
    output = sum(sum(ops.values()) for key, ops in counts.items()
                 if key.endswith(".o_proj"))
    return counter.get_total_flops() - output


@lru_cache(maxsize=None)
def measure(name: str, B: int, L: int, d: int, h: int) -> dict[str, int]:
    """Measured prefill/decode FLOPs, activation bytes and cache bytes of mixer ``name``."""
    torch.manual_seed(0)
    mixer = build_mixer(name, _config(name, d, h, L))
    x = torch.randn(B, L, d)
    out: dict[str, int] = {}
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        ctx = _context(mixer, L, B, x)
        with FlopCounterMode(display=False) as counter:
            mixer(x, ctx)
        out["flops_prefill"] = _flops_without_output(counter)
        _, state = mixer.prefill(x[:, :-1], _context_slice(ctx, L - 1))
        step_ctx = MixerContext(embeddings=None if ctx.embeddings is None else ctx.embeddings[:, -1:])
        with FlopCounterMode(display=False) as counter:
            _Step(mixer)(x[:, -1], state, step_ctx)
        out["flops_decode"] = _flops_without_output(counter)

    half = mixer.to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        _, state = half.prefill(xb, _context(half, L, B, xb))
    out["cache_bytes"] = half.cache_bytes(state)
    out["activation_bytes"] = _saved_bytes(half, xb)
    return out


def _context_slice(ctx: MixerContext, length: int) -> MixerContext:
    """The context for the first ``length`` tokens (fixed (q, k) are kept whole for decoding)."""
    import dataclasses

    return dataclasses.replace(
        ctx, cos=ctx.cos[:length], sin=ctx.sin[:length],
        embeddings=None if ctx.embeddings is None else ctx.embeddings[:, :length])


def _saved_bytes(mixer, x: torch.Tensor) -> int:
    """Bytes autograd saves for backward in one training forward of the mixer, in half precision.

    Floating tensors count 2 bytes per element whatever dtype the kernel saved (SDPA's CPU math
    backend upcasts bf16 to float32 internally; GPU kernels do not); other tensors (masks, argmax
    indices) their real size. Left out: parameters, the RoPE tables and embeddings in the context
    (computed once per model, not per layer) and the input of W^O (left out of every formula).
    """
    mixer.train()
    fixed = mixer.qk_stream in ("random", "text")
    rows = x.size(0) + 1 if fixed else x.size(0)
    inp = torch.randn(rows, x.size(1), x.size(2), dtype=x.dtype, requires_grad=True)
    ctx = _context(mixer, x.size(1), rows, inp, fixed_row=fixed)
    shared = [t for t in (ctx.cos, ctx.sin, ctx.embeddings) if t is not None]
    skip = {t.untyped_storage().data_ptr() for t in [*mixer.parameters(), *shared]}
    hook = mixer.o_proj.register_forward_pre_hook(
        lambda module, args: skip.add(args[0].untyped_storage().data_ptr())) \
        if hasattr(mixer, "o_proj") else None
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor):
        saved.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel(SDPBackend.MATH):
            mixer(inp, ctx)
    finally:
        if hook is not None:
            hook.remove()
    total = 0
    for ptr, t in saved.items():
        if ptr in skip:
            continue
        nbytes = t.untyped_storage().nbytes()
        total += nbytes // t.element_size() * 2 if t.is_floating_point() else nbytes
    return total


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["ratio"] = frame["measured"] / frame["formula_value"].where(frame["formula_value"] != 0)
    frame.loc[(frame["formula_value"] == 0) & (frame["measured"] == 0), "ratio"] = 1.0
    return frame


def _rows(size: dict, quantity) -> list[dict]:
    B, L, d, h = (size[k] for k in ("B", "L", "d", "h"))
    rows = []
    for name in ROWS:
        cls = MIXERS.get(name)
        measured = measure(name, B, L, d, h)
        for extra in quantity(cls, measured, B, L, d, h):
            rows.append({"variant": name, "label": _label(name), **extra,
                         "note": NOTES.get(name, "")})
    return rows


def table_4_5(size: dict = TEST_SIZE) -> pd.DataFrame:
    """Time complexity O(.) (Table 4.5) against measured prefill FLOPs (all GEMMs but W^O)."""
    return _frame(_rows(size, lambda cls, m, B, L, d, h: [{
        "formula": cls.complexity_latex, "formula_value": cls.complexity(B, L, d, h),
        "measured": m["flops_prefill"]}]))


def table_4_6(size: dict = TEST_SIZE) -> pd.DataFrame:
    """FLOPs per iteration, prefill and decode (Table 4.6)."""
    return _frame(_rows(size, lambda cls, m, B, L, d, h: [{
        "stage": stage, "formula": cls.flops_latex[stage],
        "formula_value": cls.flops(B, L, d, h, stage), "measured": m[f"flops_{stage}"]}
        for stage in ("prefill", "decode")]))


def table_4_7(size: dict = TEST_SIZE) -> pd.DataFrame:
    """Activation memory in bytes for half-precision training, t = 1 (Table 4.7)."""
    return _frame(_rows(size, lambda cls, m, B, L, d, h: [{
        "formula": cls.activation_latex, "formula_value": cls.activation_memory(B, L, d, h, 1),
        "measured": m["activation_bytes"]}]))


def table_4_8(size: dict = TEST_SIZE) -> pd.DataFrame:
    """Cache bytes per layer for half-precision inference (Table 4.8)."""
    return _frame(_rows(size, lambda cls, m, B, L, d, h: [{
        "formula": cls.cache_latex, "formula_value": cls.cache_size(B, L, d, h),
        "measured": m["cache_bytes"]}]))


def ch4_formula_tables(size: dict = TEST_SIZE) -> dict[str, pd.DataFrame]:
    return {"table_4_5": table_4_5(size), "table_4_6": table_4_6(size),
            "table_4_7": table_4_7(size), "table_4_8": table_4_8(size)}
