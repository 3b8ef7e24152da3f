"""Non-approximate (eqs. 4.7-4.8, 4.18): element-wise self-gating instead of pairwise similarity.

Each token scores itself, s_j = sum(SiLU(q_j) * k_j) / sqrt(d_h) per head, and a query averages the
values of the tokens so far weighted by softmax over those scores:

    o_i = sum_{j<=i} e^{s_j} v_j / sum_{j<=i} e^{s_j}.

The weights do not depend on i except through the growing denominator, so the state is one vector
and two scalars per head (running numerator, denominator and maximum). RoPE would cancel in
q_j.k_j (both at position j), so it is not applied.

The parallel form is exact and stable: scores are shifted by the running maximum (as the recurrent
form does), chunk by chunk: inside a chunk the (C x C) weights are exp(s_j - m_i) with m_i the true
running maximum at i; earlier chunks enter as sums referenced to the running maximum at their end,
rescaled by exp(r - m_i) <= 1. Every exponent is <= 0, so nothing overflows even with the logit
outliers (>10^3) the thesis reports for the uniform model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from leanlm.modeling.mixers.base import MIXERS, MixerContext, ProjectedMixer, repeat_kv


def running_softmax_average(s: torch.Tensor, v: torch.Tensor, chunk: int = 64
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For s (B, H, L) and v (B, H, L, D): numerator (B, H, L, D), denominator (B, H, L) and the
    running maximum m (B, H, L) with o_i = num_i / den_i, both referenced to exp(-m_i)."""
    b, heads, length = s.shape
    c = min(chunk, length)
    pad = (-length) % c
    dtype = torch.promote_types(s.dtype, torch.float32)  # float32 at least (float64 in tests)
    low = torch.finfo(dtype).min
    s = s.to(dtype)
    if pad:
        s = F.pad(s, (0, pad), value=low)
        v = F.pad(v, (0, 0, 0, pad))
    n = (length + pad) // c
    sc, vc = s.view(b, heads, n, c), v.to(dtype).view(b, heads, n, c, -1)

    local = sc.amax(-1)                                                # max inside each chunk
    run = local.cummax(-1).values                                      # running max at chunk ends
    prev = F.pad(run[..., :-1], (1, 0), value=low)                     # reference of earlier chunks
    # Earlier chunks: their sums referenced to their own max, shifted to prev (exponents <= 0).
    e = torch.exp(sc - local[..., None])
    chunk_num, chunk_den = (e[..., None, :] @ vc)[..., 0, :], e.sum(-1)
    earlier = torch.ones(n, n, dtype=torch.bool, device=s.device).tril(-1)
    w = torch.exp(torch.where(earlier, local[..., None, :] - prev[..., :, None], float("-inf")))
    carried_num, carried_den = w @ chunk_num, (w * chunk_den[..., None, :]).sum(-1)
    # Inside a chunk: exact running max m_i, weights exp(s_j - m_i) for j <= i.
    m = torch.maximum(prev[..., None], sc.cummax(-1).values)
    causal = torch.ones(c, c, dtype=torch.bool, device=s.device).tril()
    weights = torch.exp(torch.where(causal, sc[..., None, :] - m[..., :, None], float("-inf")))
    scale = torch.exp(prev[..., None] - m)
    num = weights @ vc + scale[..., None] * carried_num[..., None, :]
    den = weights.sum(-1) + scale * carried_den[..., None]
    unchunk = lambda t: t.reshape(b, heads, n * c, *t.shape[4:])[:, :, :length]  # noqa: E731
    return unchunk(num), unchunk(den), unchunk(m)


@MIXERS.register("non_approximate")
class NonApproximateAttention(ProjectedMixer):
    label = "Non-apx."
    complexity_latex = r"BLd^2"
    flops_latex = {"prefill": r"6BLd^2", "decode": r"6Bd^2"}
    activation_latex = r"(8BLd + 4BLh)/t"
    cache_latex = r"2Bd + 4Bh"
    chunk_size = 64

    def scores(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """s (B, n, L): each token's self-gated score; v (B, n, L, d_h)."""
        q, k, v = self.project_qkv(h)
        s = (F.silu(q) * repeat_kv(k, self.n_heads)).sum(-1) / math.sqrt(self.head_dim)
        return s, repeat_kv(v, self.n_heads)

    def masked_scores(self, h, ctx):
        s, v = self.scores(h)
        if ctx.attention_mask is not None:  # padded keys: weight exp(min - m) = 0
            dtype = torch.promote_types(s.dtype, torch.float32)
            s = s.to(dtype).masked_fill(~ctx.attention_mask.to(torch.bool)[:, None, :],
                                        torch.finfo(dtype).min)
        return s, v

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        s, v = self.masked_scores(h, ctx)
        if ctx.capture is not None:
            length = s.size(-1)
            logits = s[..., None, :].expand(*s.shape[:2], length, length)
            future = torch.ones(length, length, dtype=torch.bool, device=s.device).triu(1)
            ctx.record(logits.float().masked_fill(future, float("-inf")).softmax(-1), logits)
        num, den, _ = running_softmax_average(s, v, self.chunk_size)
        return self.merge((num / den[..., None]).to(h.dtype))

    def prefill(self, h, ctx):
        s, v = self.masked_scores(h, ctx)
        num, den, m = running_softmax_average(s, v, self.chunk_size)
        state = {"num": num[:, :, -1].to(h.dtype), "den": den[:, :, -1].to(h.dtype),
                 "m": m[:, :, -1].to(h.dtype)}
        return self.merge((num / den[..., None]).to(h.dtype)), state

    def init_state(self, batch: int, like: torch.Tensor) -> dict:
        """The empty state: zero sums and a running max of -inf."""
        return {"num": like.new_zeros(batch, self.n_heads, self.head_dim),
                "den": like.new_zeros(batch, self.n_heads),
                "m": like.new_full((batch, self.n_heads), float("-inf"))}

    def step(self, h_t, state, ctx=None):
        """Eq. 4.18 one token at a time, with the running max kept for stability."""
        s, v = self.scores(h_t[:, None])
        dtype = torch.promote_types(h_t.dtype, torch.float32)
        s, v = s[..., 0].to(dtype), v[:, :, 0].to(dtype)
        m_old = state["m"].to(dtype)
        m = torch.maximum(m_old, s)
        decay, new = torch.exp(m_old - m), torch.exp(s - m)
        num = state["num"].to(dtype) * decay[..., None] + new[..., None] * v
        den = state["den"].to(dtype) * decay + new
        out = (num / den[..., None]).to(h_t.dtype)[:, :, None]
        dtype = h_t.dtype
        return self.merge(out)[:, 0], {"num": num.to(dtype), "den": den.to(dtype), "m": m.to(dtype)}

    @staticmethod
    def complexity(B, L, d, h):
        return B * L * d * d

    @staticmethod
    def flops(B, L, d, h, stage="prefill"):
        return 6 * B * L * d * d if stage == "prefill" else 6 * B * d * d

    @staticmethod
    def activation_memory(B, L, d, h, t=1):
        return (8 * B * L * d + 4 * B * L * h) / t

    @staticmethod
    def cache_size(B, L, d, h):
        return 2 * B * d + 4 * B * h
