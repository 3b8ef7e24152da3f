"""Ch. 3's BERT encoder and GPT-2 decoder for transformers, with any of ch. 3's attention variants.

Copied verbatim into an export by ``leanlm export-hf`` (``trust_remote_code``); it imports only torch and
transformers. Parameter names are leanlm's. ``config.attention`` names the sublayer of every block:

- softmax attention that differs in how Q, K, V are projected: MHA (a projection per head), SHA (one
  shared head whose output fills every head slot), MHE-ADD / MHE-MUL (SHA's seeds combined with a learned
  embedding per head: seed + e_i, seed * (e_i + 1)), EL-ATT (keys and values are the input itself), MQA
  (one key and value head), SKV (keys and values from one shared projection), GQA (``n_kv_heads`` groups);
- token mixing without attention (encoder only for FNet): FNet (the real part of a 2-D DFT, the sequence
  zero-padded to the longest input) and Linear (a learned ``max_len`` x ``max_len`` matrix along the
  sequence, lower-triangular in a decoder, then the output projection).

BERT: post-LN blocks, exact (erf) GELU, learned (or sinusoidal) positions from ``position_offset``, token
types; the MLM head tied to the word embedding, or, for ch. 2's embeddings without a table per token
(``config.embedding``, ``modeling_leanlm_hash.py``), a matrix of its own; those read the per-token features
the export's tokenizer returns (``hash_bits``, ...), passed to ``forward`` by name. GPT-2: pre-LN blocks, tanh GELU, the head tied or not.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput, MaskedLMOutput, SequenceClassifierOutput

from .configuration_leanlm import LeanBertConfig, LeanGPT2Config
from .modeling_leanlm_hash import EMBEDDINGS, FEATURES


class Attention(nn.Module):
    """Project -> heads -> scaled dot-product attention -> merge -> output; subclasses build the projections
    (a projection one head wide is shared by every head, broadcast)."""

    def __init__(self, config, causal):
        super().__init__()
        self.n_heads, self.head_dim, self.causal = config.n_heads, config.head_dim, causal
        self.dropout = config.attention_dropout
        self.output = nn.Linear(config.n_heads * config.head_dim, config.d_model)

    def heads(self, t):
        b, length, width = t.shape
        return t.view(b, length, width // self.head_dim, self.head_dim).transpose(1, 2)

    def project(self, x):
        return self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))

    def forward(self, x, mask):
        q, k, v = self.project(x)
        n = max(q.size(1), k.size(1), v.size(1))
        q, k, v = (t if t.size(1) != 1 else t.expand(-1, n, -1, -1) for t in (q, k, v))
        bias, is_causal = None, self.causal and mask is None
        if mask is not None:
            allowed = mask[:, None, None, :]
            if self.causal:
                allowed = allowed & torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device).tril()
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

    def project(self, x):
        seeds = super().project(x)
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

    def project(self, x):
        heads = self.heads(x)
        return self.heads(self.query(x)), heads, heads


class SKV(Attention):
    def __init__(self, config, causal):
        super().__init__(config, causal)
        self.query, self.key_value = linear(config, config.n_heads), linear(config, config.n_heads)

    def project(self, x):
        kv = self.heads(self.key_value(x))
        return self.heads(self.query(x)), kv, kv


class TokenMixing(nn.Module):
    """FNet / Linear: padded positions zeroed, then mixed along the sequence (``max_len`` its longest)."""

    def __init__(self, config, causal):
        super().__init__()
        self.max_len, self.causal = config.max_position - config.position_offset, causal

    def forward(self, x, mask):
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


def word_embedding(config):
    """BERT's table, or one of ch. 2's embeddings (``modeling_leanlm_hash.py``)."""
    if getattr(config, "embedding", "standard") == "standard":
        return nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
    return EMBEDDINGS[config.embedding](config)


def features_of(kwargs):
    """The hash features among ``forward``'s keyword arguments (the tokenizer's other outputs stay out)."""
    return {name: kwargs[name] for name in FEATURES if kwargs.get(name) is not None}


def padding(attention_mask):
    """The mask as booleans, or None when it masks nothing (SDPA's mask-free path, as leanlm)."""
    return None if attention_mask is None or bool(attention_mask.all()) else attention_mask.bool()


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.offset = config.position_offset
        self.word_embeddings = word_embedding(config)
        # Sinusoids are computed when used, not kept in a buffer (transformers builds a model on the meta
        # device, where a buffer that no checkpoint holds would stay empty).
        self.sinusoidal = config.positions != "learned"
        if not self.sinusoidal:
            self.position_embeddings = nn.Embedding(config.max_position, config.d_model)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, config.d_model)
                                      if config.type_vocab_size else None)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids, token_type_ids, **features):
        positions = torch.arange(self.offset, self.offset + input_ids.size(1), device=input_ids.device)
        if self.sinusoidal:
            table = sinusoidal_positions(self.offset + input_ids.size(1), self.norm.normalized_shape[0])
            vectors = table.to(input_ids.device, self.norm.weight.dtype)[positions]
        else:
            vectors = self.position_embeddings(positions)
        x = self.word_embeddings(input_ids, **features) + vectors[None]
        if self.token_type_embeddings is not None:
            x = x + (self.token_type_embeddings.weight[0] if token_type_ids is None
                     else self.token_type_embeddings(token_type_ids))
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-LN: x = LN(x + Attn(x)); x = LN(x + W2 GELU(W1 x))."""

    def __init__(self, config):
        super().__init__()
        self.attention = ATTENTION[config.attention](config, causal=False)
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)
        self.output_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, mask):
        x = self.attention_norm(x + self.dropout(self.attention(x, mask)))
        return self.output_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class BertEncoder(nn.Module):
    def __init__(self, config, pooler):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.n_layers))
        if pooler:
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(config.d_model, config.d_model)

    def forward(self, input_ids, attention_mask, token_type_ids, **features):
        mask = padding(attention_mask)
        x = self.embeddings(input_ids, token_type_ids, **features)
        for layer in self.layers:
            x = layer(x, mask)
        return x


class GPT2Block(nn.Module):
    """Pre-LN: x = x + Attn(LN(x)); x = x + W2 GELU_tanh(W1 LN(x))."""

    def __init__(self, config):
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.attention = ATTENTION[config.attention](config, causal=True)
        self.mlp_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, mask):
        x = x + self.dropout(self.attention(self.attention_norm(x), mask))
        return x + self.dropout(self.output(F.gelu(self.intermediate(self.mlp_norm(x)), approximate="tanh")))


class GPT2Decoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.offset = config.position_offset
        self.token_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embeddings = nn.Embedding(config.max_position, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(GPT2Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, input_ids, attention_mask):
        mask = padding(attention_mask)
        positions = torch.arange(self.offset, self.offset + input_ids.size(1), device=input_ids.device)
        x = self.dropout(self.token_embeddings(input_ids) + self.position_embeddings(positions)[None])
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x)


class LeanCh3PreTrainedModel(PreTrainedModel):

    def _init_weights(self, module):  # BERT's init, for what a checkpoint does not hold
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()


def classification_loss(logits, labels, num_labels):
    if labels is None:
        return None
    if num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels.long())


class LeanBertForMaskedLM(LeanCh3PreTrainedModel):
    config_class = LeanBertConfig
    _tied_weights_keys = {"decoder.weight": "encoder.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.encoder = BertEncoder(config, pooler=False)
        self.transform = nn.Module()
        self.transform.dense = nn.Linear(config.d_model, config.d_model)
        self.transform.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embeddings.word_embeddings

    def get_output_embeddings(self):
        return self.decoder

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, **features_of(kwargs))
        logits = self.decoder(self.transform.norm(F.gelu(self.transform.dense(hidden))))
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return MaskedLMOutput(loss=loss, logits=logits)


class LeanBertForSequenceClassification(LeanCh3PreTrainedModel):
    config_class = LeanBertConfig
    def __init__(self, config):
        super().__init__(config)
        self.encoder = BertEncoder(config, pooler=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, **features_of(kwargs))
        logits = self.classifier(self.dropout(torch.tanh(self.encoder.pooler.dense(hidden[:, 0]))))
        return SequenceClassifierOutput(loss=classification_loss(logits, labels, self.config.num_labels),
                                        logits=logits)


class LeanGPT2ForCausalLM(LeanCh3PreTrainedModel, GenerationMixin):
    config_class = LeanGPT2Config
    _tied_weights_keys = {"lm_head.weight": "decoder.token_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.decoder = GPT2Decoder(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.decoder.token_embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        logits = self.lm_head(self.decoder(input_ids, attention_mask))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutput(loss=loss, logits=logits)


class LeanGPT2ForSequenceClassification(LeanCh3PreTrainedModel):
    config_class = LeanGPT2Config
    def __init__(self, config):
        super().__init__(config)
        self.decoder = GPT2Decoder(config)
        self.score = nn.Linear(config.d_model, config.num_labels, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        hidden = self.decoder(input_ids, attention_mask)
        # the last real token of each row (the rightmost with mask 1, else the rightmost non-pad id)
        real = attention_mask.bool() if attention_mask is not None else input_ids != self.config.pad_token_id
        last = (torch.arange(input_ids.size(1), device=input_ids.device) * real).argmax(dim=-1)
        logits = self.score(hidden[torch.arange(hidden.size(0), device=hidden.device), last])
        return SequenceClassifierOutput(loss=classification_loss(logits, labels, self.config.num_labels),
                                        logits=logits)
