"""Ch. 4's decoder for transformers: leanlm's Qwen2.5-style model with a token mixer per layer.

Copied verbatim into an export by ``leanlm export-hf`` (``trust_remote_code``); it imports only torch and
transformers. Each block (pre-norm): x = x + Mixer(RMSNorm(x)); x = x + SwiGLU(RMSNorm(x)). The mixer of
layer i is ``config.layer_kinds[i]``: "standard" (Qwen's attention: RoPE, QKV bias, MHA or GQA, q/k norms
with ``qk_norm``) or the simple variant ``config.simple_mixer``. Parameter names are leanlm's (Qwen2's).

Every mixer is written here in its direct form, a few lines of the thesis's equation, rather than
leanlm's linear-time training forms (chunked states, hand-written backward): the same outputs within
float rounding, at a quadratic cost in the input length that inference on an exported model can afford.

``config.skip_layers``: 0-based layers left out (Table 4.1's HYBRID SKIP evaluates a trained hybrid
without its simple layers); empty by default.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_leanlm import LeanQwenConfig


class RMSNorm(nn.Module):
    """x / rms(x) * weight, normalised in float32 whatever the input dtype (Qwen's)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = float(eps)

    def forward(self, x):
        shape = (x.size(-1),)
        if x.dtype == self.weight.dtype == torch.float32:
            return F.rms_norm(x, shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), shape, eps=self.eps).to(x.dtype)


def rope_tables(length, head_dim, theta, like):
    """RoPE's cos and sin (length, head_dim), halves rotated together as in Qwen."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=like.device, dtype=torch.float32) / head_dim))
    angles = torch.arange(length, device=like.device).float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def rotate(t, cos, sin):
    half = t.size(-1) // 2
    return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin


def causal(length, device):
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def softmax_attention(q, k, v, mask):
    """Causal softmax attention (keys and values may have fewer heads: GQA); ``mask`` (B, L) bool or None."""
    gqa = k.size(1) != q.size(1)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    allowed = causal(q.size(2), q.device) & mask[:, None, None, :]
    bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)


def repeat_heads(t, n_heads):
    """(B, kv, L, d) -> (B, n_heads, L, d): each key/value head serves its group of query heads."""
    return t if t.size(1) == n_heads else t.repeat_interleave(n_heads // t.size(1), dim=1)


class GatedMLP(nn.Module):
    """down(SiLU(gate(x)) * up(x)): the blocks' feed-forward, and the MLP mixer."""

    def __init__(self, d_model, width):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MLPMixer(nn.Module):
    """MLP (eqs. 4.4-4.5): no token mixing; its width matches Standard's parameter count."""

    def __init__(self, config):
        super().__init__()
        self.mlp = GatedMLP(config.d_model, config.mlp_mixer_width)

    def forward(self, h, ctx):
        return self.mlp(h)


class Projected(nn.Module):
    """Q, K, V and output projections (Qwen2's; with ``qk_norm`` Qwen3's per-head norms and no bias)."""

    def __init__(self, config):
        super().__init__()
        d, n, kv, dh = config.d_model, config.n_heads, config.kv_heads, config.head_dim
        bias = not config.qk_norm
        self.n_heads, self.head_dim = n, dh
        self.q_proj = nn.Linear(d, n * dh, bias=bias)
        self.k_proj = nn.Linear(d, kv * dh, bias=bias)
        self.v_proj = nn.Linear(d, kv * dh, bias=bias)
        self.o_proj = nn.Linear(n * dh, d, bias=False)
        self.q_norm = RMSNorm(dh, config.layer_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(dh, config.layer_norm_eps) if config.qk_norm else None

    def heads(self, t, norm=None):
        b, length, width = t.shape
        t = t.view(b, length, width // self.head_dim, self.head_dim).transpose(1, 2)
        return t if norm is None else norm(t)

    def q(self, x):
        return self.heads(self.q_proj(x), self.q_norm)

    def k(self, x):
        return self.heads(self.k_proj(x), self.k_norm)

    def v(self, x):
        return self.heads(self.v_proj(x))

    def merge(self, heads):
        b, n, length, dh = heads.shape
        return self.o_proj(heads.transpose(1, 2).reshape(b, length, n * dh))


class StandardAttention(Projected):
    """Standard (eqs. 4.1-4.3): Qwen's causal softmax attention."""

    def qk_source(self, h, ctx):
        return h

    def forward(self, h, ctx):
        source = self.qk_source(h, ctx)
        q, k = rotate(self.q(source), ctx["cos"], ctx["sin"]), rotate(self.k(source), ctx["cos"], ctx["sin"])
        return self.merge(softmax_attention(q, k, self.v(h), ctx["mask"]))


class StaticEmbQK(StandardAttention):
    """StaticEmbQK (eq. 4.13): Q and K from the block's input norm of the token embeddings."""

    def qk_source(self, h, ctx):
        return ctx["norm"](ctx["embeddings"])


class SharedMap(Projected):
    """RndEmbQK / FixedSeqQK (eqs. 4.9-4.12): Q and K from the model's fixed sequence run through the same
    blocks, V from the input; one causal map per layer for the whole batch (no padding mask: right padding
    only follows real tokens)."""

    def forward(self, h, ctx):
        if ctx["record"] is not None:  # the fixed sequence itself, (1, L, d): its own Q and K
            q, k = rotate(self.q(h), ctx["cos"], ctx["sin"]), rotate(self.k(h), ctx["cos"], ctx["sin"])
            ctx["record"][ctx["layer"]] = (q, k)
        else:
            q, k = ctx["fixed"][ctx["layer"]]
        v = self.v(h)
        shape = (v.size(0), -1, -1, -1)
        return self.merge(softmax_attention(q.expand(shape), k.expand(shape), v, None))


class Approximate(Projected):
    """Approximate (eq. 4.6): softmax's exp replaced by 1 + s + s^2/2, one joint normaliser."""

    def weights(self, q, k):
        s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        return 1 + s + 0.5 * s * s

    def forward(self, h, ctx):
        q, k = rotate(self.q(h), ctx["cos"], ctx["sin"]), rotate(self.k(h), ctx["cos"], ctx["sin"])
        k, v = repeat_heads(k, self.n_heads), repeat_heads(self.v(h), self.n_heads)
        w = self.weights(q, k) * allowed(ctx, q)
        return self.merge(w @ v / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny))


class ApproximatePerTerm(Approximate):
    """The appendix's Approximate (eqs. 4.14-4.17): the running mean of v plus the first- and second-order
    terms, each normalised on its own (element-wise squares scaled by 1/sqrt(2)). Its first-order
    denominator q.sum(k) can be near zero, where rounding grows: each term is computed as leanlm computes
    a chunk, numerator and denominator in one product with [v, 1] zeroed at padded keys."""

    def forward(self, h, ctx):
        q, k = rotate(self.q(h), ctx["cos"], ctx["sin"]), rotate(self.k(h), ctx["cos"], ctx["sin"])
        k, v = repeat_heads(k, self.n_heads), repeat_heads(self.v(h), self.n_heads)
        ones = torch.ones_like(v[..., :1])
        if ctx["mask"] is not None:
            ones = ctx["mask"][:, None, :, None].to(v.dtype)
        va = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) * ones
        future = ~causal(q.size(2), q.device)
        square = lambda x: x * x / math.sqrt(2.0)  # noqa: E731
        first = (q @ k.transpose(-1, -2)).masked_fill(future, 0.0) @ va
        second = (square(q) @ square(k).transpose(-1, -2)).masked_fill(future, 0.0) @ va
        out = (va[..., :-1].cumsum(2) / ones.cumsum(2) + first[..., :-1] / first[..., -1:]
               + second[..., :-1] / second[..., -1:])
        return self.merge(out)


class NonApproximate(Projected):
    """Non-approximate (eqs. 4.7-4.8): each token scores itself, s_j = SiLU(q_j).k_j / sqrt(d_h), and a query
    averages the values so far by softmax over those scores (no RoPE: it would cancel in q_j.k_j)."""

    def forward(self, h, ctx):
        q, k, v = self.q(h), repeat_heads(self.k(h), self.n_heads), repeat_heads(self.v(h), self.n_heads)
        dtype = torch.promote_types(q.dtype, torch.float32)
        s = ((F.silu(q) * k).sum(-1) / math.sqrt(self.head_dim)).to(dtype)
        if ctx["mask"] is not None:
            s = s.masked_fill(~ctx["mask"][:, None, :], torch.finfo(dtype).min)
        length = s.size(-1)
        scores = s[..., None, :].expand(*s.shape[:2], length, length)
        probs = scores.masked_fill(~causal(length, s.device), float("-inf")).softmax(-1)
        return self.merge((probs @ v.to(dtype)).to(h.dtype))


def allowed(ctx, like):
    """(B or 1, 1, L, L): 1 where a query may read a key (causal, key not padding), else 0."""
    ok = causal(like.size(2), like.device)[None, None]
    if ctx["mask"] is not None:
        ok = ok & ctx["mask"][:, None, None, :]
    return ok.to(like.dtype)


MIXERS = {"standard": StandardAttention, "mlp": MLPMixer, "approximate": Approximate,
          "approximate_per_term": ApproximatePerTerm, "non_approximate": NonApproximate,
          "rnd_emb_qk": SharedMap, "fixed_seq_qk": SharedMap, "static_emb_qk": StaticEmbQK}


class Block(nn.Module):
    def __init__(self, config, mixer):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.self_attn = MIXERS[mixer](config)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.mlp = GatedMLP(config.d_model, config.d_ff)

    def forward(self, x, ctx):
        x = x + self.self_attn(self.input_layernorm(x), {**ctx, "norm": self.input_layernorm})
        return x + self.mlp(self.post_attention_layernorm(x))


class LeanQwenPreTrainedModel(PreTrainedModel):
    config_class = LeanQwenConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]

    def _init_weights(self, module):  # Qwen2's init, for what a checkpoint does not hold
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()
        elif isinstance(module, RMSNorm):
            module.weight.data.fill_(1.0)


class LeanQwenModel(LeanQwenPreTrainedModel):
    """Embeddings, blocks, final norm; and, for RndEmbQK / FixedSeqQK, the fixed sequence (a buffer of the
    checkpoint: N(0, sigma^2) vectors, or the token ids of a fixed text)."""

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config, config.simple_mixer if kind == "simple" else "standard")
                                    for kind in config.layer_kinds)
        self.norm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.qk_stream = config.qk_stream
        if self.qk_stream == "random":
            self.register_buffer("fixed_embeddings", torch.zeros(config.max_position, config.d_model))
        elif self.qk_stream == "text":
            self.register_buffer("fixed_token_ids", torch.zeros(config.max_position, dtype=torch.long))
        self.post_init()

    def run(self, x, ctx):
        skip = set(self.config.skip_layers or ())
        for i, layer in enumerate(self.layers):
            if i not in skip:
                x = layer(x, {**ctx, "layer": i})
        return x

    def fixed_qk(self, length, like):
        """Each layer's (q, k) of the fixed sequence's first ``length`` positions (causal: a prefix)."""
        if length > self.config.max_position:
            raise ValueError(f"input of {length} tokens is longer than the fixed Q/K sequence "
                             f"(max_position={self.config.max_position})")
        if self.qk_stream == "random":
            x = self.fixed_embeddings[None, :length].to(like.dtype)
        else:
            x = self.embed_tokens(self.fixed_token_ids[None, :length])
        cos, sin = rope_tables(length, self.config.head_dim, self.config.rope_theta, x)
        record = {}
        self.run(x, {"cos": cos, "sin": sin, "mask": None, "embeddings": x, "record": record, "fixed": None})
        return record

    def forward(self, input_ids, attention_mask=None):
        length = input_ids.size(1)
        mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask.bool()
        x = self.embed_tokens(input_ids)
        cos, sin = rope_tables(length, self.config.head_dim, self.config.rope_theta, x)
        fixed = self.fixed_qk(length, x) if self.qk_stream in ("random", "text") else None
        ctx = {"cos": cos, "sin": sin, "mask": mask, "embeddings": x, "record": None, "fixed": fixed}
        return self.norm(self.run(x, ctx))


class LeanQwenForCausalLM(LeanQwenPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = LeanQwenModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        """Logits (B, L, vocab_size); with ``labels`` (the input ids, -100 ignored) the next-token loss."""
        logits = self.lm_head(self.model(input_ids, attention_mask))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)
