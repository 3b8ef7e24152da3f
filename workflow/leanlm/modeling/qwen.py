"""The Qwen2.5-style decoder of ch. 4, with a token mixer per layer chosen by the layout.

Each block (pre-norm): x = x + Mixer(RMSNorm(x)); x = x + SwiGLU(RMSNorm(x)). Standard layers use
Qwen's attention (RoPE with ``rope_theta``, QKV bias, MHA or GQA by ``n_kv_heads``, q/k RMSNorm
with ``qk_norm`` for the Qwen3-style 1.7B); the layout (layouts.py) says which layers use the
simple variant ``config.attention`` instead. Parameter names follow Hugging Face's Qwen2 (a
standard model's state dict has its keys).

Beyond the input, some mixers need (mixers/base.py, MixerContext):

- RndEmbQK / FixedSeqQK: a fixed sequence (``fixed_embeddings``: N(0, sigma^2) vectors with sigma
  the init std; ``fixed_token_ids``: a fixed text, set with :meth:`QwenForCausalLM.set_fixed_sequence`)
  runs through the same blocks as row 0 of the batch, and gives every layer its Q, K. At inference
  without gradients its per-layer (q, k) are computed once at ``max_position`` tokens and cached
  (causal, so any shorter input uses a prefix); the cache follows in-place weight updates.
- StaticEmbQK: the input token embeddings.

Evaluation helpers: ``skip_layers`` (0-based blocks left out, e.g. ``layouts.skip_set("hybrid",
n)`` for Table 4.1's SKIP), and :meth:`QwenForCausalLM.capture_attention` for attention maps and
pre-softmax logits per layer and head (the normal path never builds a map).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.layouts import SIMPLE, check_skip_layers, layer_kinds
from leanlm.modeling.mixers import MIXERS, GatedMLP, MixerContext, RMSNorm, build_mixer
from leanlm.modeling.lm_loss import shift_left, vocab_cross_entropy
from leanlm.modeling.mixers.base import rope_dtype, rope_tables
from leanlm.modeling.models import register_model
from leanlm.modeling.padding import padding_mask
from leanlm.modeling.recompute import BlockStack
from leanlm.modeling.vocab import real_logits, vocab_table


def simple_mixer_name(config: ModelConfig) -> str:
    """The mixer of the simple layers; ch. 3's "mha" (the ModelConfig default) means "standard"."""
    name = "standard" if config.attention == "mha" else config.attention
    if name not in MIXERS:
        raise ConfigError(f"attention={config.attention!r} is not a ch. 4 token mixer; the Qwen "
                          f"decoder takes one of: {', '.join(MIXERS.names())}")
    return name


@torch.no_grad()
def init_qwen_weights(module: nn.Module, std: float) -> None:
    """Qwen2's init: linear and embedding weights ~ N(0, std), biases 0 (norms start at 1)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.normal_(0.0, std)
            if getattr(m, "bias", None) is not None:
                m.bias.zero_()


class QwenBlock(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, mixer: str):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.self_attn = build_mixer(mixer, config, layer_idx)      # HF's name for the mixer
        self.post_attention_layernorm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.mlp = GatedMLP(config.d_model, config.d_ff)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        h = self.input_layernorm(x)
        x = x + self.dropout(self.self_attn(h, ctx.at(self.layer_idx, self.input_layernorm)))
        return x + self.dropout(self.mlp(self.post_attention_layernorm(x)))


class QwenModel(BlockStack, nn.Module):
    """Embeddings, blocks (each checkpointed when ``activation_checkpointing``, leanlm.modeling.recompute)
    and the final norm; owns the fixed Q/K stream where a mixer needs one."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        simple = simple_mixer_name(config)
        self.layer_kinds = layer_kinds(config.layout, config.n_layers)
        # config.vocab_rows: padded for the tensor cores, as the head tied to it (leanlm.modeling.vocab)
        self.embed_tokens = vocab_table(nn.Embedding(config.vocab_rows, config.d_model), config.vocab_size)
        self.layers = nn.ModuleList(
            QwenBlock(config, i, simple if kind == SIMPLE else "standard")
            for i, kind in enumerate(self.layer_kinds))
        self.norm = RMSNorm(config.d_model, config.layer_norm_eps)
        uses_simple = SIMPLE in self.layer_kinds
        self.qk_stream = MIXERS.get(simple).qk_stream if uses_simple else None
        if self.qk_stream == "random":
            self.register_buffer("fixed_embeddings", torch.empty(config.max_position, config.d_model))
        elif self.qk_stream == "text":
            self.register_buffer("fixed_token_ids",
                                 torch.full((config.max_position,), -1, dtype=torch.long))
        self._capture: dict | None = None
        self._fixed_cache: tuple | None = None
        self._text_checked = -1

    # ---------------------------------------------------------------- the fixed Q/K stream
    @property
    def has_fixed_stream(self) -> bool:
        return self.qk_stream in ("random", "text")

    def fixed_stream(self, length: int, dtype: torch.dtype) -> torch.Tensor:
        """The fixed sequence's input to block 1, (1, length, d_m)."""
        if length > self.config.max_position:
            raise ConfigError(f"input of {length} tokens is longer than the fixed Q/K sequence "
                              f"(max_position={self.config.max_position})")
        if self.qk_stream == "random":
            return self.fixed_embeddings[None, :length].to(dtype)
        ids = self.fixed_token_ids
        # Checked once per change, not every step, and in eager forwards only: compiled, reading the ids
        # on the host would break the graph (the pipeline sets the text before training; an unset one
        # then fails in the embedding lookup instead).
        if not torch.compiler.is_compiling() and ids._version != self._text_checked:
            if bool((ids < 0).any()):
                raise ConfigError(
                    "FixedSeqQK needs its fixed text: call model.set_fixed_sequence(token_ids) with "
                    f"{self.config.max_position} token ids of one real document (the thesis uses the "
                    "first 2048 tokens of a FineWeb sample-10BT document)")
            self._text_checked = ids._version
        return self.embed_tokens(ids[None, :length])

    def fixed_qk(self, skip_layers: frozenset = frozenset()) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer fixed (q, k) at ``max_position`` tokens, computed once (no gradients) and
        reused until a weight, buffer, device, dtype or the skipped layers change."""
        weight = self.embed_tokens.weight
        key = (skip_layers, weight.device, weight.dtype, weight.data_ptr(),
               torch.is_autocast_enabled(weight.device.type),
               sum(t._version for t in [*self.parameters(), *self.buffers()]))
        if self._fixed_cache is not None and self._fixed_cache[0] == key:
            return self._fixed_cache[1]
        length = self.config.max_position
        with torch.no_grad():
            x = self.fixed_stream(length, weight.dtype)
            cos, sin = rope_tables(torch.arange(length, device=weight.device), self.config.head_dim,
                                   self.config.rope_theta, rope_dtype(x))
            ctx = MixerContext(cos=cos, sin=sin, fixed_row=True, record_qk={})
            for layer in self.layers:
                if layer.layer_idx not in skip_layers:
                    x = layer(x, ctx)
        self._fixed_cache = (key, ctx.record_qk)
        return ctx.record_qk

    # ---------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                skip_layers: frozenset = frozenset()) -> torch.Tensor:
        """Final hidden states (B, L, d_m)."""
        length = input_ids.size(1)
        attention_mask = padding_mask(attention_mask)  # None without padding: SDPA's mask-free causal path
        x = self.embed_tokens(input_ids)
        # Built once per forward in the compute dtype (bf16 under autocast; mixers/base.rope_dtype).
        cos, sin = rope_tables(torch.arange(length, device=x.device), self.config.head_dim,
                               self.config.rope_theta, rope_dtype(x))
        ctx = MixerContext(cos=cos, sin=sin, attention_mask=attention_mask, capture=self._capture,
                           embeddings=x if self.qk_stream == "embeddings" else None)
        if self.has_fixed_stream:
            if not self.training and not torch.is_grad_enabled():
                ctx.fixed_qk = self.fixed_qk(skip_layers)
            else:  # training form: the fixed sequence is row 0 of the batch, through the same blocks
                x = torch.cat([self.fixed_stream(length, x.dtype), x])
                ctx.fixed_row = True
                if attention_mask is not None:
                    ctx.attention_mask = torch.cat([attention_mask.new_ones(1, length), attention_mask])
        for layer in self.layers:
            if layer.layer_idx not in skip_layers:
                x = self.run_block(layer, x, ctx)
        if ctx.fixed_row:
            x = x[1:]
        return self.norm(x)


@register_model("qwen", "causal_lm")
class QwenForCausalLM(nn.Module):
    """Next-token LM: ``forward(input_ids, attention_mask=None, labels=None) -> {"loss", "logits"}``.

    ``labels`` are the input ids (shifted inside: position i predicts token i+1); -100 is ignored.
    ``skip_layers``: 0-based blocks to leave out (evaluation of a trained hybrid without its simple
    layers, no retraining).
    """

    backbone_prefix = "model."
    fresh_prefixes = ()
    takes_return_logits = True  # forward(return_logits=False): the loss alone (the engine's training step)

    def __init__(self, config: ModelConfig, skip_layers: Iterable[int] = ()):
        super().__init__()
        if config.backbone != "qwen":
            raise ConfigError(f"QwenForCausalLM needs backbone='qwen', got {config.backbone!r}")
        self.config = config
        self.model = QwenModel(config)
        self.lm_head = vocab_table(nn.Linear(config.d_model, config.vocab_rows, bias=False), config.vocab_size)
        init_qwen_weights(self, config.initializer_range)
        if self.model.qk_stream == "random" and not self.model.fixed_embeddings.is_meta:
            with torch.no_grad():  # the thesis's epsilon ~ N(0, sigma^2), sigma = embedding init std
                self.model.fixed_embeddings.normal_(0.0, config.initializer_range)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.skip_layers = skip_layers

    @property
    def skip_layers(self) -> frozenset[int]:
        return self._skip_layers

    @skip_layers.setter
    def skip_layers(self, layers: Iterable[int]) -> None:
        self._skip_layers = check_skip_layers(layers or (), self.config.n_layers)

    @property
    def layer_kinds(self) -> list[str]:
        return self.model.layer_kinds

    def set_fixed_sequence(self, token_ids) -> None:
        """FixedSeqQK's fixed text: at least ``max_position`` token ids (the first are used)."""
        if self.model.qk_stream != "text":
            raise ConfigError(f"set_fixed_sequence is for FixedSeqQK models; this one uses "
                              f"attention={self.config.attention!r}")
        ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
        need = self.config.max_position
        if ids.numel() < need or bool((ids < 0).any()) or bool((ids >= self.config.vocab_size).any()):
            raise ConfigError(f"the fixed sequence needs {need} token ids in [0, "
                              f"{self.config.vocab_size}); got {ids.numel()} ids")
        with torch.no_grad():
            self.model.fixed_token_ids.copy_(ids[:need])

    def fixed_qk(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """The cached per-layer fixed (q, k) of RndEmbQK/FixedSeqQK (for decoding with ``prefill``)."""
        return self.model.fixed_qk(self.skip_layers)

    @contextmanager
    def capture_attention(self) -> Iterator[dict[int, dict[str, torch.Tensor]]]:
        """Within the block, forwards fill the yielded dict: layer (0-based) -> {"probs", "logits"},
        each (batch or 1 for a shared map, heads, L, L). MLP layers have no entry."""
        store: dict[int, dict[str, torch.Tensor]] = {}
        previous, self.model._capture = self.model._capture, store
        try:
            yield store
        finally:
            self.model._capture = previous

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_logits: bool = True) -> dict[str, torch.Tensor | None]:
        """Logits (B, L, V) and, with labels, the mean next-token cross-entropy (0 with a graph when
        nothing is to be predicted). ``return_logits=False`` (the training step): the loss alone, in
        chunks of rows so the logits never exist whole (leanlm.modeling.lm_loss); logits is None."""
        hidden = self.model(input_ids, attention_mask, self.skip_layers)
        if labels is None:
            return {"loss": None, "logits": real_logits(self.lm_head(hidden), self.config.vocab_size)}
        loss, logits = vocab_cross_entropy(hidden, self.lm_head.weight, None, shift_left(labels),
                                           self.config.vocab_size, return_logits=return_logits)
        return {"loss": loss, "logits": logits}
