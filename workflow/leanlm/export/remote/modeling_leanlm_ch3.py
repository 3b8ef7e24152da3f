"""Ch. 3's BERT encoder and GPT-2 decoder for transformers, with any of ch. 3's attention variants.

Copied verbatim into an export by ``leanlm export-hf`` (``trust_remote_code``); it imports only torch and
transformers. Parameter names are leanlm's. ``config.attention`` names the sublayer of every block, one of
``modeling_leanlm_attention.py``'s variants (MHA, SHA, MHE-ADD/MUL, EL-ATT, MQA, SKV, GQA, FNet, Linear).

BERT: post-LN blocks, exact (erf) GELU, learned (or sinusoidal) positions from ``position_offset``, token
types; the MLM head tied to the word embedding, or, for ch. 2's embeddings without a table per token
(``config.embedding``, ``modeling_leanlm_hash.py``), a matrix of its own; those read the per-token features
the export's tokenizer returns (``hash_bits``, ...), passed to ``forward`` by name. Every BERT head holds the
encoder as ``encoder``, a ``LeanBertModel`` (``AutoModel``: the encoder a researcher fine-tunes). The heads:
MLM, sequence classification, and ch. 2's Shuffle+Random as token classification. GPT-2: pre-LN blocks,
tanh GELU, the head tied or not.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (BaseModelOutput, CausalLMOutput, MaskedLMOutput,
                                           SequenceClassifierOutput, TokenClassifierOutput)

from .configuration_leanlm import LeanBertConfig, LeanGPT2Config
from .modeling_leanlm_attention import ATTENTION, init_normal_and_layer_norm, sinusoidal_positions
from .modeling_leanlm_hash import EMBEDDINGS, FEATURES


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
        init_normal_and_layer_norm(module, self.config.initializer_range)


class LeanBertModel(LeanCh3PreTrainedModel):
    """The encoder without a head (``AutoModel``): what every BERT head below holds as ``encoder``, so that
    ``AutoModel`` loads it from any of their exports (transformers strips the ``encoder.`` prefix)."""

    config_class = LeanBertConfig
    base_model_prefix = "encoder"

    def __init__(self, config, add_pooling_layer=False):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.n_layers))
        if add_pooling_layer:
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(config.d_model, config.d_model)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        mask = padding(attention_mask)
        x = self.embeddings(input_ids, token_type_ids, **features_of(kwargs))
        for layer in self.layers:
            x = layer(x, mask)
        return BaseModelOutput(last_hidden_state=x)


def classification_loss(logits, labels, num_labels):
    if labels is None:
        return None
    if num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels.long())


class LeanBertForMaskedLM(LeanCh3PreTrainedModel):
    config_class = LeanBertConfig
    base_model_prefix = "encoder"
    _tied_weights_keys = {"decoder.weight": "encoder.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.encoder = LeanBertModel(config)
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
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, **kwargs).last_hidden_state
        logits = self.decoder(self.transform.norm(F.gelu(self.transform.dense(hidden))))
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return MaskedLMOutput(loss=loss, logits=logits)


class LeanBertForSequenceClassification(LeanCh3PreTrainedModel):
    config_class = LeanBertConfig
    base_model_prefix = "encoder"

    def __init__(self, config):
        super().__init__(config)
        self.encoder = LeanBertModel(config, add_pooling_layer=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, **kwargs).last_hidden_state
        logits = self.classifier(self.dropout(torch.tanh(self.encoder.pooler.dense(hidden[:, 0]))))
        return SequenceClassifierOutput(loss=classification_loss(logits, labels, self.config.num_labels),
                                        logits=logits)


class LeanBertForTokenClassification(LeanCh3PreTrainedModel):
    """ch. 2's Shuffle+Random head: each token original / shuffled / random (``id2label``). The head is
    ``config.shuffle_random_head``: ``bert`` (BERT's MLM transform, dense + GELU + LayerNorm, then a linear
    layer to the labels) or ``official_code`` (the official HashFormers code's dropout + linear)."""

    config_class = LeanBertConfig
    base_model_prefix = "encoder"

    def __init__(self, config):
        super().__init__(config)
        self.encoder = LeanBertModel(config)
        if config.shuffle_random_head == "bert":
            self.transform = nn.Module()
            self.transform.dense = nn.Linear(config.d_model, config.d_model)
            self.transform.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        else:
            self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, **kwargs).last_hidden_state
        if self.config.shuffle_random_head == "bert":
            hidden = self.transform.norm(F.gelu(self.transform.dense(hidden)))
        else:
            hidden = self.dropout(hidden)
        logits = self.classifier(hidden)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return TokenClassifierOutput(loss=loss, logits=logits)


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
