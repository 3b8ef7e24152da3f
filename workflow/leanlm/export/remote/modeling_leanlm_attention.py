"""Ch. 3's attention variants for the exported models (``modeling_leanlm_ch3.py``, ``modeling_leanlm_seq2seq.py``).

Copied verbatim into an export by ``leanlm export-hf`` (``trust_remote_code``); it imports only torch.
Parameter names are leanlm's. :data:`ATTENTION` maps ``config.attention`` to the sublayer of every block:

- softmax attention that differs in how Q, K, V are projected: MHA (a projection per head), SHA (one
  shared head whose output fills every head slot), MHE-ADD / MHE-MUL (SHA's seeds combined with a learned
  embedding per head: seed + e_i, seed * (e_i + 1)), EL-ATT (keys and values are the input itself), MQA
  (one key and value head), SKV (keys and values from one shared projection), GQA (``n_kv_heads`` groups);
  each also attends from a decoder to the encoder's output (``memory``: keys and values from it);
- token mixing without attention (self only; encoder only for FNet): FNet (the real part of a 2-D DFT, the
  sequence zero-padded to the longest input) and Linear (a learned ``max_len`` x ``max_len`` matrix along
  the sequence, lower-triangular in a decoder, then the output projection).

Also the fixed sinusoidal position table (:func:`sinusoidal_positions`) the templates' models add.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Project -> heads -> scaled dot-product attention -> merge -> output; subclasses build the projections
    (a projection one head wide is shared by every head, broadcast). Queries come from ``x``, keys and values
    from ``memory`` (cross-attention) or ``x``; ``mask`` (B, keys) is True at the keys that may be attended."""

    def __init__(self, config, causal):
        super().__init__()
        self.n_heads, self.head_dim, self.causal = config.n_heads, config.head_dim, causal
        self.dropout = config.attention_dropout
        self.output = nn.Linear(config.n_heads * config.head_dim, config.d_model)

    def heads(self, t):
        b, length, width = t.shape
        return t.view(b, length, width // self.head_dim, self.head_dim).transpose(1, 2)

    def project(self, x, memory):
        return self.heads(self.query(x)), self.heads(self.key(memory)), self.heads(self.value(memory))

    def forward(self, x, mask, memory=None):
        q, k, v = self.project(x, x if memory is None else memory)
        n = max(q.size(1), k.size(1), v.size(1))
        q, k, v = (t if t.size(1) != 1 else t.expand(-1, n, -1, -1) for t in (q, k, v))
        bias, is_causal = None, self.causal and mask is None
        if mask is not None:
            allowed = mask[:, None, None, :]
            if self.causal:
                allowed = allowed & torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=x.device).tril()
            bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(~allowed, torch.finfo(q.dtype).min)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=is_causal,
                                             dropout_p=self.dropout if self.training else 0.0,
                                             enable_gqa=k.size(1) != q.size(1))
        b, heads, length, dh = out.shape
        out = out.expand(-1, self.n_heads, -1, -1)  # SHA's one head fills every slot
        return self.output(out.transpose(1, 2).reshape(b, length, self.n_heads * dh))


def linear(config, heads):
    return nn.Linear(config.d_model, heads * config.head_dim)


class MHA(Attention):
    def __init__(self, config, causal, kv_heads=None):
        super().__init__(config, causal)
        kv = kv_heads or config.n_heads
        self.query, self.key, self.value = linear(config, config.n_heads), linear(config, kv), linear(config, kv)


class GQA(MHA):
    def __init__(self, config, causal):
        super().__init__(config, causal, config.n_kv_heads)


class MQA(MHA):
    def __init__(self, config, causal):
        super().__init__(config, causal, 1)


class SHA(Attention):
    def __init__(self, config, causal):
        super().__init__(config, causal)
        self.query, self.key, self.value = linear(config, 1), linear(config, 1), linear(config, 1)


class MHE(SHA):
    """SHA's seeds, each combined with one learned embedding per head (``psi``)."""

    def __init__(self, config, causal):
        super().__init__(config, causal)
        for name in ("query", "key", "value"):
            setattr(self, f"{name}_head_embeddings", nn.Parameter(torch.zeros(config.n_heads, config.head_dim)))

    def project(self, x, memory):
        seeds = super().project(x, memory)
        embeddings = (self.query_head_embeddings, self.key_head_embeddings, self.value_head_embeddings)
        return tuple(self.psi(seed, e[None, :, None, :]) for seed, e in zip(seeds, embeddings))


class MHEAdd(MHE):
    @staticmethod
    def psi(seed, e):
        return seed + e


class MHEMul(MHE):
    @staticmethod
    def psi(seed, e):
        return seed * (e + 1.0)


class ELAtt(Attention):
    def __init__(self, config, causal):
        super().__init__(config, causal)
        self.query = linear(config, config.n_heads)

    def project(self, x, memory):
        heads = self.heads(memory)
        return self.heads(self.query(x)), heads, heads


class SKV(Attention):
    def __init__(self, config, causal):
        super().__init__(config, causal)
        self.query, self.key_value = linear(config, config.n_heads), linear(config, config.n_heads)

    def project(self, x, memory):
        kv = self.heads(self.key_value(memory))
        return self.heads(self.query(x)), kv, kv


class TokenMixing(nn.Module):
    """FNet / Linear: padded positions zeroed, then mixed along the sequence (``max_len`` its longest)."""

    def __init__(self, config, causal):
        super().__init__()
        self.max_len, self.causal = config.max_position - config.position_offset, causal

    def forward(self, x, mask, memory=None):
        if memory is not None:
            raise ValueError(f"{type(self).__name__} mixes a sequence with itself: it has no cross-attention form")
        if mask is not None:
            x = x * mask[..., None].to(x.dtype)
        return self.mix(x)


class FNet(TokenMixing):
    def mix(self, x):
        spectrum = torch.fft.fftn(x.float(), s=(self.max_len, x.size(-1)), dim=(-2, -1))
        return spectrum.real[..., :x.size(-2), :].to(x.dtype)


class LinearMixing(TokenMixing):
    def __init__(self, config, causal):
        super().__init__(config, causal)
        self.sequence_mixing = nn.Parameter(torch.zeros(self.max_len, self.max_len))
        self.output = nn.Linear(config.d_model, config.d_model)

    def mix(self, x):
        weights = self.sequence_mixing[:x.size(-2), :x.size(-2)]
        return self.output(torch.matmul(weights.tril() if self.causal else weights, x))


ATTENTION = {"mha": MHA, "sha": SHA, "mhe_add": MHEAdd, "mhe_mul": MHEMul, "el_att": ELAtt, "mqa": MQA,
             "skv": SKV, "gqa": GQA, "fnet": FNet, "linear": LinearMixing}


def sinusoidal_positions(length, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    angles = position * torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


def init_normal_and_layer_norm(module: nn.Module, std: float) -> None:
    """BERT's initialisation of one module, for what a checkpoint does not hold: Linear and Embedding weights
    N(0, std^2) with zero biases, LayerNorm at weight 1 and bias 0 (the ch. 3 models and the encoder-decoder)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        module.weight.data.normal_(0.0, std)
        if getattr(module, "bias", None) is not None:
            module.bias.data.zero_()
    elif isinstance(module, nn.LayerNorm):
        module.weight.data.fill_(1.0)
        module.bias.data.zero_()
