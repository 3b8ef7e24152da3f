"""Variants whose queries and keys do not come from the current hidden states (§4.3.4-4.3.5).

RndEmbQK (eqs. 4.9-4.10) and FixedSeqQK (4.11-4.12): Q, K come from a fixed sequence X run through
the same blocks as the input (N(0, sigma^2) vectors, or the embeddings of a fixed text), V from the
input, so each layer has one attention map for every input: computed once per layer, shared by
the batch, and cacheable at inference (Tables 4.6-4.8 count it once, not B times). The model owns
the fixed sequence and runs it as row 0 of the batch (``ctx.fixed_row``) or hands over its cached
per-layer (q, k) (``ctx.fixed_qk``); through any block the fixed row itself gets plain attention.

StaticEmbQK (eq. 4.13): Q, K from the input token embeddings Emb(t) (normalised by the block's
input RMSNorm, as every Q/K source is), V from the hidden states: maps depend on the input but
not on depth, so all layers' scores could be computed in parallel.

The padding mask cannot enter a shared map (it differs per row); for a causal model with right
padding (how this project pads) that changes nothing for real tokens.
"""

from __future__ import annotations

import torch

from leanlm.modeling.grouping import grouped_attention
from leanlm.modeling.mixers.base import (
    MIXERS,
    MixerContext,
    ProjectedMixer,
    apply_rope,
    explicit_softmax_attention,
    repeat_kv,
)
from leanlm.modeling.mixers.standard import StandardAttention


def shared_map_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                         dropout_p: float = 0.0) -> torch.Tensor:
    """One attention map for many value rows: q (1, n, Lq, d_h), k (1, kv, L, d_h), v (R, kv, L, d_h)
    -> (R, n, Lq, d_h). The R rows are folded into the value width, so QK^T and the softmax are
    computed once (2 L^2 d FLOPs) and only A V is per row."""
    rows, kv, length, dh = v.shape
    folded = v.permute(1, 2, 0, 3).reshape(1, kv, length, rows * dh)
    out = grouped_attention(q, k, folded, is_causal=causal, dropout_p=dropout_p)
    n, q_len = q.size(1), q.size(2)
    return out.view(n, q_len, rows, dh).permute(2, 0, 1, 3)


class SharedMapAttention(ProjectedMixer):
    """Q, K from the model's fixed stream (same for every input), V from the input."""

    qk_stream = "fixed"
    complexity_latex = r"BL^2d + BLd^2"
    flops_latex = {"prefill": r"2L^2d + 2BL^2d + 6BLd^2", "decode": r"2Ld + 2BLd + 6Bd^2"}
    activation_latex = r"(4BLd + 8Ld + 2L^2h)/t"
    cache_latex = r"2(B + 1)Ld"

    def shared_qk(self, h: torch.Tensor, ctx: MixerContext) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's fixed (q, k), (1, heads, L, d_h), RoPE applied."""
        length = h.size(1)
        if ctx.fixed_qk is not None:
            q, k = ctx.fixed_qk[ctx.layer]
            return q[:, :, :length], k[:, :, :length]
        if not ctx.fixed_row:
            raise RuntimeError(
                f"{type(self).__name__} (layer {ctx.layer}) needs the fixed Q/K stream: run it inside "
                "QwenForCausalLM, or give ctx.fixed_row=True with the stream as row 0, or ctx.fixed_qk")
        source = h[:1]
        q = apply_rope(self.project_q(source), ctx.cos, ctx.sin)
        k = apply_rope(self.project_k(source), ctx.cos, ctx.sin)
        if ctx.record_qk is not None:
            ctx.record_qk[ctx.layer] = (q, k)
        return q, k

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        q, k = self.shared_qk(h, ctx)
        if ctx.capture is not None:
            probs, logits = explicit_softmax_attention(q, repeat_kv(k, self.n_heads), None)
            ctx.record(probs, logits, shared=True)
        return self.merge(shared_map_attention(q, k, self.project_v(h), dropout_p=self.attn_dropout))

    def prefill(self, h, ctx):
        if ctx.fixed_qk is None:
            raise RuntimeError(f"{type(self).__name__}.prefill needs the cached fixed stream "
                               "(ctx.fixed_qk; QwenForCausalLM.fixed_qk() builds it)")
        q_all, k_all = ctx.fixed_qk[ctx.layer]
        length = h.size(1)
        v = self.project_v(h)
        out = shared_map_attention(q_all[:, :, :length], k_all[:, :, :length], v)
        # The cache is the batch's values plus one shared set of keys; the full fixed (q, k) for
        # later positions are precomputed like weights and are not counted (Table 4.8).
        return self.merge(out), {"v": v, "k": k_all[:, :, :length], "fixed": (q_all, k_all),
                                 "pos": length}

    def step(self, h_t, state, ctx=None):
        pos = state["pos"]
        q_all, k_all = state["fixed"]
        v = torch.cat([state["v"], self.project_v(h_t[:, None])], dim=2)
        out = shared_map_attention(q_all[:, :, pos:pos + 1], k_all[:, :, :pos + 1], v, causal=False)
        return self.merge(out)[:, 0], {"v": v, "k": k_all[:, :, :pos + 1], "fixed": state["fixed"],
                                       "pos": pos + 1}

    @staticmethod
    def complexity(B, L, d, h):
        return B * L * L * d + B * L * d * d

    @staticmethod
    def flops(B, L, d, h, stage="prefill"):
        if stage == "prefill":
            return 2 * L * L * d + 2 * B * L * L * d + 6 * B * L * d * d
        return 2 * L * d + 2 * B * L * d + 6 * B * d * d

    @staticmethod
    def activation_memory(B, L, d, h, t=1):
        return (4 * B * L * d + 8 * L * d + 2 * L * L * h) / t

    @staticmethod
    def cache_size(B, L, d, h):
        return 2 * (B + 1) * L * d


@MIXERS.register("rnd_emb_qk")
class RndEmbQKAttention(SharedMapAttention):
    """Fixed stream: N(0, sigma^2) vectors (sigma = the embedding init std), one per position."""

    label = "RndEmbQK"
    qk_stream = "random"


@MIXERS.register("fixed_seq_qk")
class FixedSeqQKAttention(SharedMapAttention):
    """Fixed stream: the embeddings of a fixed text (the first tokens of one real document)."""

    label = "FixedSeqQK"
    qk_stream = "text"


@MIXERS.register("static_emb_qk")
class StaticEmbQKAttention(StandardAttention):
    """Standard attention with Q, K from RMSNorm(Emb(t)) instead of the block's hidden states."""

    label = "StaticEmbQK"
    qk_stream = "embeddings"

    def qk_source(self, ctx: MixerContext | None) -> torch.Tensor:
        if ctx is None or ctx.embeddings is None:
            raise RuntimeError("StaticEmbQK needs the input token embeddings in ctx.embeddings")
        return ctx.norm(ctx.embeddings) if ctx.norm is not None else ctx.embeddings
