"""Standard: Qwen2.5's causal softmax attention (eqs. 4.1-4.3), the baseline of ch. 4.

Q, K, V = H W^{Q,K,V} (with bias), RoPE on Q and K, optional per-head RMSNorm on Q and K (Qwen3),
grouped-query attention when ``n_kv_heads`` < ``n_heads`` (leanlm.modeling.grouping, shared with ch. 3's
``gqa``), and F.scaled_dot_product_attention.
"""

from __future__ import annotations

import torch

from leanlm.modeling.grouping import grouped_attention
from leanlm.modeling.joint_linear import joins
from leanlm.modeling.mixers.base import (
    MIXERS,
    MixerContext,
    ProjectedMixer,
    apply_rope,
    causal_bias,
    explicit_softmax_attention,
    repeat_kv,
)


@MIXERS.register("standard")
class StandardAttention(ProjectedMixer):
    label = "Standard"
    complexity_latex = r"BL^2d + BLd^2"
    flops_latex = {"prefill": r"4BL^2d + 6BLd^2", "decode": r"6Bd^2 + 4BLd"}
    activation_latex = r"(8BLd + 2BL^2h)/t"
    cache_latex = r"4BLd"

    def qkv(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            qk_source: torch.Tensor | None = None):
        """RoPE'd queries and keys from ``qk_source`` (default: ``h``), values from ``h``; one GEMM for
        the three when they all read ``h``."""
        if qk_source is None:
            q, k, v = self.project_qkv(h)
        else:
            q, k, v = self.project_q(qk_source), self.project_k(qk_source), self.project_v(h)
        # SDPA saves v for backward: a view of the joint GEMM would keep its whole output alive, the
        # pre-RoPE q and k with it (which q/k norms save anyway): v gets its own memory, as it had.
        # With Q, K from elsewhere (StaticEmbQK) v is copied too, so that SDPA gets the very layouts
        # Standard gives it (v (B, heads, L, d_h)-contiguous, not a strided view of (B, L, d_m)): the
        # only difference between the two at SDPA, where StaticEmbQK's step took 2.9x Standard's on the
        # H200 (docs/benchmarks.md: suspected, not measured, as the cause).
        if joins(h) and self.q_norm is None:
            v = v.contiguous()
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def qk_source(self, ctx: MixerContext | None) -> torch.Tensor | None:
        """Where Q and K come from besides ``h`` (None: ``h`` itself, the current hidden states)."""
        return None

    def forward(self, h: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        return self.attend(*self.qkv(h, ctx.cos, ctx.sin, self.qk_source(ctx)), ctx)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: MixerContext
               ) -> torch.Tensor:
        bias, is_causal = causal_bias(ctx.attention_mask, q.size(2), q)
        if ctx.capture is not None:
            probs, logits = explicit_softmax_attention(q, repeat_kv(k, self.n_heads), bias)
            ctx.record(probs, logits)
        out = grouped_attention(q, k, v, attn_mask=bias, is_causal=is_causal, dropout_p=self.attn_dropout)
        return self.merge(out)

    # ---------------------------------------------------------------- decoding: the KV cache
    def prefill(self, h: torch.Tensor, ctx: MixerContext) -> tuple[torch.Tensor, dict]:
        q, k, v = self.qkv(h, ctx.cos, ctx.sin, self.qk_source(ctx))
        return self.attend(q, k, v, ctx), {"k": k, "v": v, "pos": h.size(1)}

    def step(self, h_t: torch.Tensor, state: dict, ctx: MixerContext | None = None):
        cos, sin = self.step_rope(state["pos"], h_t)
        q, k, v = self.qkv(h_t[:, None], cos, sin, self.qk_source(ctx))
        k = torch.cat([state["k"], k], dim=2)
        v = torch.cat([state["v"], v], dim=2)
        # One query attends to every cached key: no mask needed.
        out = grouped_attention(q, k, v)
        return self.merge(out)[:, 0], {"k": k, "v": v, "pos": state["pos"] + 1}

    # ---------------------------------------------------------------- Tables 4.5-4.8
    @staticmethod
    def complexity(B, L, d, h):
        return B * L * L * d + B * L * d * d

    @staticmethod
    def flops(B, L, d, h, stage="prefill"):
        return 4 * B * L * L * d + 6 * B * L * d * d if stage == "prefill" else 6 * B * d * d + 4 * B * L * d

    @staticmethod
    def activation_memory(B, L, d, h, t=1):
        return (8 * B * L * d + 2 * B * L * L * h) / t

    @staticmethod
    def cache_size(B, L, d, h):
        return 4 * B * L * d
