"""Approximate (eq. 4.6): softmax's exp replaced by its second-order Taylor expansion, which makes
attention linear in the sequence length (Based, Arora et al. 2024).

exp(s) ~ 1 + s + s^2/2 with s = q.k/sqrt(d_h) is the dot product of two feature maps, so
o_i = sum_{j<=i} phi(q_i).phi(k_j) v_j / sum_{j<=i} phi(q_i).phi(k_j) needs only the running sums
S = sum phi(k_j) v_j^T and z = sum phi(k_j): a recurrent form with a constant-size state.
1 + s + s^2/2 >= 1/2, so the single joint normaliser (DESIGN §8) is always positive. Its kernel
(:mod:`leanlm.modeling.mixers.taylor`) uses the symmetric second-order features, (d_h+1)(d_h+2)/2
per head instead of Based's 1 + d_h + d_h^2, chunk by chunk with the state carried between chunks.

``approximate_per_term`` is the appendix's form (eqs. 4.14-4.17): three terms, each normalised on
its own, with element-wise squares in the second-order term; its state is exactly what Table 4.8
counts (6Bd + 4Bd^2/h bytes). Its first-order denominator q.sum(k) can be near zero: that is the
appendix's formula, kept as printed. Under autocast its parallel form sums in float32: in bf16 (8
significant bits) that denominator, a sum of terms of both signs that can be thousands of times
smaller than they are, came out exactly 0 where a chunk's own part and the earlier chunks' part
rounded to equal and opposite numbers (measured: 8.875 and -8.875 for a true -0.064, from terms
whose magnitudes add to 155), and the division made the loss NaN at initialisation (qwen_70m's
width, 2 x 256 tokens: every seed tried; issue 23). Even so its gradient at initialisation is
ill-conditioned (rounding the weights to bf16 moves the fp32 gradient by over 100%;
tests/test_bf16.py), a property of the formula, not of a dtype. A model cast to bf16 as a whole (the
benchmarks and Tables 4.7/4.8's measurements time and size bf16 tensors) computes in bf16 as asked.

Both have a parallel (training) form, linear in L (pairwise scores inside chunks, running states
across chunks, no loop over tokens), and a recurrent ``step`` for decoding; tests check they agree.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from leanlm.modeling.mixers.base import (MIXERS, MixerContext, ProjectedMixer, apply_rope,
                                         autocast_enabled, autocast_off, repeat_kv)
from leanlm.modeling.mixers.taylor import taylor_attention, taylor_step


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            feature_map: Callable[[torch.Tensor], torch.Tensor],
                            pair_scores: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                            chunk: int) -> torch.Tensor:
    """sum_{j<=i} phi(q_i).phi(k_j) v_j for every i: (B, H, L, e) x2, (B, H, L, D) -> (B, H, L, D).

    ``pair_scores(qc, kc)`` must equal ``feature_map(qc) @ feature_map(kc).T``; it is used inside
    each chunk of ``chunk`` tokens (cheaper than features when they are wide), while tokens in
    earlier chunks enter through the exclusive running state sum phi(k_j) v_j^T. Time and memory
    are linear in L. A zero row of ``v`` contributes nothing (how padding is excluded).
    """
    b, heads, length, _ = q.shape
    c = min(chunk, length)
    pad = (-length) % c
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    n = (length + pad) // c
    qc, kc, vc = (t.reshape(b, heads, n, c, t.size(-1)) for t in (q, k, v))
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    intra = pair_scores(qc, kc).masked_fill(~causal, 0.0) @ vc
    states = feature_map(kc).transpose(-1, -2) @ vc                      # (B, H, N, F, D)
    # Exclusive prefix over chunks (shifted cumsum, not cumsum - S: no cancellation).
    previous = F.pad(states.cumsum(2)[:, :, :-1], (0, 0, 0, 0, 1, 0))
    inter = feature_map(qc) @ previous
    return (intra + inter).reshape(b, heads, n * c, -1)[:, :, :length]


def with_ones(v: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """[v, 1] per token (the last column accumulates the normaliser), zeroed at padded tokens."""
    out = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    return out if keep is None else out * keep


def keep_mask(ctx: MixerContext, like: torch.Tensor) -> torch.Tensor | None:
    """(B, 1, L, 1) with 1 for tokens and 0 for padding, or None without padding."""
    if ctx.attention_mask is None:
        return None
    return ctx.attention_mask[:, None, :, None].to(like.dtype)


class LinearAttentionMixer(ProjectedMixer):
    """Shared by both Approximate forms: RoPE'd Q, K (K/V repeated to every query head for GQA)."""

    chunk_size = 64

    def qkv(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        q, k, v = self.project_qkv(h)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, repeat_kv(k, self.n_heads), repeat_kv(v, self.n_heads)

    def step_qkv(self, h_t: torch.Tensor, pos: int):
        cos, sin = self.step_rope(pos, h_t)
        return self.qkv(h_t[:, None], cos, sin)

    # Tables 4.5-4.8 (the appendix's accounting, shared by both forms).
    label = "Approx."
    complexity_latex = r"BLd^2"
    flops_latex = {"prefill": r"14BLd^2", "decode": r"10Bd^2"}
    activation_latex = r"11BLd/t + 3Bd^2/ht"
    cache_latex = r"6Bd + 4Bd^2/h"

    @staticmethod
    def complexity(B, L, d, h):
        return B * L * d * d

    @staticmethod
    def flops(B, L, d, h, stage="prefill"):
        return 14 * B * L * d * d if stage == "prefill" else 10 * B * d * d

    @staticmethod
    def activation_memory(B, L, d, h, t=1):
        return 11 * B * L * d / t + 3 * B * d * d / (h * t)

    @staticmethod
    def cache_size(B, L, d, h):
        return 6 * B * d + 4 * B * d * d // h


@MIXERS.register("approximate")
class ApproximateAttention(LinearAttentionMixer):
    """Second-order Taylor attention with one joint normaliser (Based's kernel, symmetric features)."""

    # Tokens per chunk of the parallel form: the (C x C) pairwise part grows with C, the number
    # of chunk steps (small kernels) shrinks. On the 2-core CPU at d_h = 64, L = 8192
    # (benchmarks/mixers.py, docs/benchmarks.md) 128 was fastest in training (0.90-1.15x Standard; 64:
    # 0.75-1.07x, 256: 0.95-1.03x) and inference (1.2x). Any value gives the same result.
    chunk_size = 128

    @staticmethod
    def taylor(s: torch.Tensor) -> torch.Tensor:
        return 1 + s + 0.5 * s * s

    @staticmethod
    def normalise(out: torch.Tensor) -> torch.Tensor:
        """Numerators / the joint normaliser (last column). A real token's normaliser is >= 1/2
        (its own weight), so the clamp only turns 0/0 at left padding (no token yet) into 0."""
        return out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        q, k, v = self.qkv(h, ctx.cos, ctx.sin)
        keep = keep_mask(ctx, v)
        if ctx.capture is not None:
            self.record(q, k, keep, ctx)
        out, _ = taylor_attention(q, k, with_ones(v, keep), self.chunk_size)
        return self.merge(self.normalise(out))

    def record(self, q, k, keep, ctx):
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        weights = self.taylor(logits).tril()
        if keep is not None:
            weights = weights * keep.transpose(-1, -2)
        ctx.record(weights / weights.sum(-1, keepdim=True), logits)

    def prefill(self, h, ctx):
        q, k, v = self.qkv(h, ctx.cos, ctx.sin)
        out, S = taylor_attention(q, k, with_ones(v, keep_mask(ctx, v)), self.chunk_size,
                                  return_state=True)
        return self.merge(self.normalise(out)), {"S": S, "pos": h.size(1)}

    def step(self, h_t, state, ctx=None):
        q, k, v = self.step_qkv(h_t, state["pos"])
        out, S = taylor_step(q, k, with_ones(v, None), state["S"])
        return self.merge(self.normalise(out))[:, 0], {"S": S, "pos": state["pos"] + 1}


@MIXERS.register("approximate_per_term")
class ApproximatePerTermAttention(LinearAttentionMixer):
    """The appendix's form: o = o_0 + o_1 + o_2 (eqs. 4.14-4.17), each term with its own normaliser.

    o_0 is the running mean of v; o_1 = q.sum(k^T v) / q.sum(k); o_2 the same with element-wise
    squares scaled by 1/sqrt(2). Each ratio is invariant to the scale of q and k, so no 1/sqrt(d_h).
    """

    @staticmethod
    def square(x: torch.Tensor) -> torch.Tensor:
        return x * x / math.sqrt(2.0)

    @staticmethod
    def identity(x: torch.Tensor) -> torch.Tensor:
        return x

    def terms(self, q, k, va, keep):
        """(o_0 numerator/denominator, o_1 num|den, o_2 num|den) for the parallel form; in float32
        under autocast, where its GEMMs would run in bf16 (the module docstring says why not)."""
        device = q.device.type
        if not autocast_enabled(device):
            return self._terms(q, k, va, keep)
        at_least_32 = lambda t: t.to(torch.promote_types(t.dtype, torch.float32))  # noqa: E731
        with autocast_off(device):
            return self._terms(at_least_32(q), at_least_32(k), at_least_32(va),
                               None if keep is None else at_least_32(keep))

    def _terms(self, q, k, va, keep):
        ones = torch.ones_like(va[..., -1:]) if keep is None else keep
        first = causal_linear_attention(q, k, va, self.identity,
                                        lambda a, b: a @ b.transpose(-1, -2), self.chunk_size)
        sq = self.square
        second = causal_linear_attention(q, k, va, sq, lambda a, b: sq(a) @ sq(b).transpose(-1, -2),
                                         self.chunk_size)
        return va[..., :-1].cumsum(2), ones.cumsum(2), first, second

    @staticmethod
    def combine(sum_v, count, first, second):
        return (sum_v / count + first[..., :-1] / first[..., -1:]
                + second[..., :-1] / second[..., -1:])

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        q, k, v = self.qkv(h, ctx.cos, ctx.sin)
        keep = keep_mask(ctx, v)
        if ctx.capture is not None:
            self.record(q, k, keep, ctx)
        return self.merge(self.combine(*self.terms(q, k, with_ones(v, keep), keep)))

    def record(self, q, k, keep, ctx):
        """The effective map A_0 + A_1 + A_2 (rows sum to 3; A_1 may be negative)."""
        length = q.size(2)
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        maps = []
        for scores in (torch.ones_like(q[..., :1]) @ torch.ones_like(k[..., :1]).transpose(-1, -2),
                       q @ k.transpose(-1, -2),
                       self.square(q) @ self.square(k).transpose(-1, -2)):
            scores = scores.masked_fill(~causal, 0.0)
            if keep is not None:
                scores = scores * keep.transpose(-1, -2)
            maps.append(scores / scores.sum(-1, keepdim=True))
        ctx.record(sum(maps), q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)))

    def prefill(self, h, ctx):
        q, k, v = self.qkv(h, ctx.cos, ctx.sin)
        keep = keep_mask(ctx, v)
        va = with_ones(v, keep)
        sum_v, count, first, second = self.terms(q, k, va, keep)
        state = {"sum_v": sum_v[:, :, -1], "count": count[:, :, -1].long(),
                 "S1": k.transpose(-1, -2) @ va,
                 "S2": self.square(k).transpose(-1, -2) @ va, "pos": h.size(1)}
        return self.merge(self.combine(sum_v, count, first, second)), state

    def step(self, h_t, state, ctx=None):
        q, k, v = self.step_qkv(h_t, state["pos"])
        va = with_ones(v, None)
        sum_v = state["sum_v"] + v[:, :, 0]
        count = state["count"] + 1
        S1 = state["S1"] + k.transpose(-1, -2) @ va
        S2 = state["S2"] + self.square(k).transpose(-1, -2) @ va
        first, second = q @ S1, self.square(q) @ S2
        out = self.combine(sum_v[:, :, None], count[:, :, None].to(v.dtype), first, second)
        return self.merge(out)[:, 0], {"sum_v": sum_v, "count": count, "S1": S1, "S2": S2,
                                       "pos": state["pos"] + 1}
