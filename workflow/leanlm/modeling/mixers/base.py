"""What every ch. 4 token mixer shares: the registry, the context a mixer reads, RMSNorm, RoPE,
and the Q/K/V/O projections of the attention-like variants.

A *mixer* is the sublayer of a Qwen block that mixes tokens (or, for the MLP variant, does not).
The block normalises its input once and calls ``mixer(h, ctx)`` with ``h`` (B, L, d_m); ``ctx``
(:class:`MixerContext`) carries the few things some variants need besides ``h``:

- ``cos``/``sin``: RoPE tables for positions 0..L-1 (computed once per forward, shared by layers);
- ``attention_mask``: (B, L), 1 = token, 0 = padding (None when there is no padding);
- ``embeddings``: the input token embeddings Emb(t) (StaticEmbQK takes Q, K from them);
- ``fixed_row``: row 0 of ``h`` is the fixed Q/K stream of RndEmbQK/FixedSeqQK, run through the same
  blocks as the batch (training form); ``fixed_qk`` instead holds that stream's per-layer (q, k),
  computed once and cached (inference form); ``record_qk`` collects them while building the cache;
- ``norm``: the block's input RMSNorm, applied to Q/K sources that are not ``h`` (the embeddings);
- ``capture``: when not None, mixers that form attention maps store them there, per layer, for
  analysis (probabilities and pre-softmax logits); the normal path never builds a map;
- ``layer``: the 0-based index of the block.

Each variant also carries its rows of Tables 4.5-4.8 (LaTeX and a function of B, L, d, h), so the
tables are rendered from the classes and checked against measurements (reporting/ch4/formulas.py).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.modeling.grouping import check_kv_heads, repeat_kv  # noqa: F401  (repeat_kv: the mixers' import)
from leanlm.modeling.joint_linear import joint_linear
# The registry is this folder's modules, each loaded when a model names one of its mixers (leanlm.modeling.variants).
from leanlm.modeling.variants import MIXERS, Variant  # noqa: F401


@dataclass
class MixerContext:
    """Per-forward inputs a mixer may need besides its block input (see the module docstring)."""

    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None
    fixed_row: bool = False
    fixed_qk: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    record_qk: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    capture: dict[int, dict[str, torch.Tensor]] | None = None
    norm: Callable[[torch.Tensor], torch.Tensor] | None = None
    layer: int = 0

    def at(self, layer: int, norm: Callable[[torch.Tensor], torch.Tensor] | None) -> "MixerContext":
        return dataclasses.replace(self, layer=layer, norm=norm)

    def record(self, probs: torch.Tensor, logits: torch.Tensor, shared: bool = False) -> None:
        """Store this layer's attention map when capturing.

        ``probs`` (R, heads, L, L) are the weights each query puts on each key (rows sum to 1;
        future keys 0); ``logits`` the raw pre-softmax scores (future entries are not meaningful:
        analyses use the causal lower triangle). With a fixed row in the batch, row 0 is dropped
        unless the map is ``shared`` by the whole batch (then it has one row).
        """
        if self.capture is None:
            return
        if self.fixed_row and not shared:
            probs, logits = probs[1:], logits[1:]
        self.capture[self.layer] = {"probs": probs.detach(), "logits": logits.detach()}


class RMSNorm(nn.Module):
    """Qwen's RMSNorm: x / rms(x) * weight, computed in float32 whatever the input dtype.

    torch's ``F.rms_norm`` (one fused kernel on CUDA, where the hand-written form was four elementwise
    passes and a reduction; on a CPU the same ops as before). Qwen normalises in float32, rounds back
    to the input's dtype, then scales (``weight * x.to(dtype)``, promoting to the weight's dtype): the
    weight goes inside the kernel only where that rounding is a no-op (float32 input and weight), so
    every dtype computes the same numbers as Qwen's formula (tests/test_fused_kernels.py).
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.size(-1),)
        if x.dtype == self.weight.dtype == torch.float32:
            return F.rms_norm(x, shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), shape, eps=self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE cos/sin (len(positions), head_dim), half-split layout as in Qwen/Llama."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.float32) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope_dtype(like: torch.Tensor) -> torch.dtype:
    """The dtype RoPE's tables are built in for hidden states ``like``: autocast's where autocast is on
    for their device (float64 excepted, as autocast leaves it), else ``like``'s own.

    The projections' queries and keys come out of autocast in bf16; float32 tables would promote the
    rotation, and everything after it up to SDPA's own cast, to float32: twice the memory traffic for
    the same bf16 attention. Without autocast the tables are the hidden states' dtype, as they were.
    """
    device = like.device.type
    if like.dtype != torch.float64 and autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return like.dtype


def apply_rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``t`` (..., L, d_h) by the tables (L, d_h): t*cos + rotate_half(t)*sin."""
    half = t.size(-1) // 2
    rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
    return t * cos + rotated * sin


def autocast_available(device_type: str) -> bool:
    """Whether torch's autocast knows ``device_type``. Under torch.compile the answer is True without
    asking: torch 2.11's dynamo cannot trace the query (``torch._C._is_autocast_available``, a C builtin),
    so each call was a graph break in every decoder (the first GPU check, docs/gpu-check.md), and every
    device torch.compile generates code for (cpu, cuda, xpu, mps) has autocast. (joint_linear.joins
    guards its query the same way.)"""
    return torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (False for devices autocast does not know)."""
    return autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def autocast_off(device_type: str):
    """A context with autocast off on ``device_type``, for kernels that choose their own dtypes."""
    if not autocast_available(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def causal_bias(attention_mask: torch.Tensor | None, length: int, like: torch.Tensor
                ) -> tuple[torch.Tensor | None, bool]:
    """SDPA's mask for causal self-attention: ``(None, True)`` without padding (fastest kernels),
    else an additive bias (B, 1, L, L) with padded keys and future keys at the dtype's minimum."""
    if attention_mask is None:
        return None, True
    allowed = torch.ones(length, length, dtype=torch.bool, device=like.device).tril()
    allowed = allowed & attention_mask.to(torch.bool)[:, None, None, :]
    bias = torch.zeros(allowed.shape, dtype=like.dtype, device=like.device)
    return bias.masked_fill(~allowed, torch.finfo(like.dtype).min), False


def explicit_softmax_attention(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(probs, logits) of causal softmax attention, built explicitly (capture path only)."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    length = logits.size(-1)
    future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    masked = logits.float().masked_fill(future, float("-inf"))
    if bias is not None:
        masked = masked + bias.float()
    return masked.softmax(-1).to(q.dtype), logits


class GatedMLP(nn.Module):
    """down(SiLU(gate(x)) * up(x)), no biases (Qwen's MLP; the thesis's FC_Gt, FC_Up, FC_Dn)."""

    def __init__(self, d_model: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Mixer(Variant, nn.Module, abc.ABC):
    """Base of the registry's token mixers: ``forward(h, ctx) -> (B, L, d_m)``, built as ``cls(config, layer_idx)``
    (:func:`build_mixer`); the registry contract (``options``, ``check_config``) is :class:`leanlm.modeling.variants.Variant`'s.

    Decoding: ``prefill(h, ctx) -> (out, state)`` processes a prompt and returns what inference
    keeps; ``step(h_t, state, ctx) -> (y_t, state)`` processes one more token (h_t: (B, d_m)).
    ``cache_bytes(state)`` is the size of what grows with the context (Table 4.8's quantity).

    Table rows (class attributes and static methods of (B, L, d, h)) follow the thesis's printed
    formulas: Table 4.5 complexity, 4.6 FLOPs per iteration (prefill/decode), 4.7 activation
    memory (t = tensor-parallel size), 4.8 cache bytes.
    """

    label: ClassVar[str] = ""
    # What the model must supply for Q/K besides h: None, "random"/"text" (a fixed stream run
    # through the blocks) or "embeddings" (the input token embeddings).
    qk_stream: ClassVar[str | None] = None
    complexity_latex: ClassVar[str] = ""
    flops_latex: ClassVar[dict[str, str]] = {}
    activation_latex: ClassVar[str] = ""
    cache_latex: ClassVar[str] = ""

    def __init__(self, config: Any, layer_idx: int = 0):
        super().__init__()
        self.d_model = config.d_model
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.kv_heads = config.kv_heads
        self.rope_theta = float(config.rope_theta)
        self.layer_idx = int(layer_idx)

    # Every variant decodes (abstract: a registered mixer without these cannot be built).
    @abc.abstractmethod
    def prefill(self, h: torch.Tensor, ctx: MixerContext) -> tuple[torch.Tensor, dict]:
        """Process a prompt: outputs and the state inference keeps."""

    @abc.abstractmethod
    def step(self, h_t: torch.Tensor, state: dict, ctx: MixerContext | None = None
             ) -> tuple[torch.Tensor, dict]:
        """Process one more token with the state from :meth:`prefill` or the previous step."""

    @staticmethod
    def cache_bytes(state: dict) -> int:
        """Bytes of the state tensors (each counted once); variants exclude what is not a cache."""
        seen, total = set(), 0
        for t in state.values():
            if isinstance(t, torch.Tensor) and t.is_floating_point() and id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
        return total

    # Thesis formulas, one set per variant (abstract: Tables 4.5-4.8 need every one).
    @staticmethod
    @abc.abstractmethod
    def complexity(B: int, L: int, d: int, h: int) -> int:
        """Table 4.5: time complexity of one forward over L tokens."""

    @staticmethod
    @abc.abstractmethod
    def flops(B: int, L: int, d: int, h: int, stage: str = "prefill") -> int:
        """Table 4.6: FLOPs per iteration (``stage`` prefill or decode)."""

    @staticmethod
    @abc.abstractmethod
    def activation_memory(B: int, L: int, d: int, h: int, t: int = 1) -> float:
        """Table 4.7: activation memory (t = tensor-parallel size)."""

    @staticmethod
    @abc.abstractmethod
    def cache_size(B: int, L: int, d: int, h: int) -> int:
        """Table 4.8: cache size for L tokens."""


class ProjectedMixer(Mixer):
    """Mixers built from Q, K, V and output projections (every variant but MLP).

    Qwen2.5: Q/K/V with bias, W^O without; K/V have ``kv_heads`` heads (GQA when fewer than
    ``n_heads``: option ``n_kv_heads``, leanlm.modeling.grouping). With ``qk_norm`` (Qwen3) Q and K get a
    per-head RMSNorm and the projections no bias, as in Qwen3. Every projected variant has exactly these
    parameters, so their counts match.
    """

    options = ("n_kv_heads",)

    @classmethod
    def check_config(cls, config: Any, where: str = "model config") -> None:
        check_kv_heads(f"token mixer {cls.variant_name!r}", config.n_heads, config.n_kv_heads, where)

    def __init__(self, config: Any, layer_idx: int = 0):
        super().__init__(config, layer_idx)
        d, n, kv, dh = config.d_model, config.n_heads, config.kv_heads, config.head_dim
        bias = not config.qk_norm
        self.q_proj = nn.Linear(d, n * dh, bias=bias)
        self.k_proj = nn.Linear(d, kv * dh, bias=bias)
        self.v_proj = nn.Linear(d, kv * dh, bias=bias)
        self.o_proj = nn.Linear(n * dh, d, bias=False)
        self.q_norm = RMSNorm(dh, config.layer_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(dh, config.layer_norm_eps) if config.qk_norm else None
        self.dropout = float(config.attention_dropout)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        """(B, L, heads*d_h) -> (B, heads, L, d_h)."""
        b, length, width = t.shape
        return t.view(b, length, width // self.head_dim, self.head_dim).transpose(1, 2)

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        return self._normed(self.split(self.q_proj(x)), self.q_norm)

    def project_k(self, x: torch.Tensor) -> torch.Tensor:
        return self._normed(self.split(self.k_proj(x)), self.k_norm)

    def project_v(self, x: torch.Tensor) -> torch.Tensor:
        return self.split(self.v_proj(x))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(project_q(x), project_k(x), project_v(x))`` in one GEMM (:func:`joint_linear`), for the
        variants whose Q, K and V all read ``x``."""
        q, k, v = (self.split(t) for t in joint_linear(x, self.q_proj, self.k_proj, self.v_proj))
        return self._normed(q, self.q_norm), self._normed(k, self.k_norm), v

    @staticmethod
    def _normed(t: torch.Tensor, norm: RMSNorm | None) -> torch.Tensor:
        return t if norm is None else norm(t)

    def merge(self, heads: torch.Tensor) -> torch.Tensor:
        """(B, n, L, d_h) -> output projection -> (B, L, d_m)."""
        b, n, length, dh = heads.shape
        return self.o_proj(heads.transpose(1, 2).reshape(b, length, n * dh))

    def step_rope(self, pos: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(torch.tensor([pos], device=like.device), self.head_dim,
                           self.rope_theta, rope_dtype(like))

    @property
    def attn_dropout(self) -> float:
        return self.dropout if self.training else 0.0


def build_mixer(name: str, config: Any, layer_idx: int = 0) -> Mixer:
    """Instantiate the mixer registered as ``name`` (ConfigError if unknown)."""
    return MIXERS.get(name)(config, layer_idx)
