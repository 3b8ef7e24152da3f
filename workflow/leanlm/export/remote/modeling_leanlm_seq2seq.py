"""Ch. 3's encoder-decoder (Vaswani et al., 2017; WMT-14 en-de) for transformers, with any of ch. 3's softmax
attention variants in every attention sublayer.

Copied verbatim into an export by ``leanlm export-hf`` (``trust_remote_code``); it imports only torch and
transformers. Parameter names are leanlm's. As leanlm's model: post-LN blocks (x = LN(x + sublayer(x))), a ReLU
feed-forward network, fixed sinusoidal positions from 0 added to the token embeddings scaled by sqrt(d_model),
and one embedding matrix shared by the source, the target and (``tie_word_embeddings``) the pre-softmax
projection. The encoder has ``n_layers`` blocks, the decoder ``n_decoder_layers``; every attention sublayer
(encoder self, decoder causal self, decoder cross) is ``config.attention`` (``modeling_leanlm_attention.py``).

Token ids follow the translation tokenizer shipped beside it: <pad>=0, <unk>=1, <s>=2 (the decoder's first
input, ``decoder_start_token_id``), </s>=3 (ends source and target). ``generate()`` recomputes the target
prefix at every step (no key/value cache).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from .configuration_leanlm import LeanTransformerConfig
from .modeling_leanlm_attention import ATTENTION, init_normal_and_layer_norm, sinusoidal_positions


def padding(attention_mask):
    """The mask as booleans, or None when it masks nothing (SDPA's mask-free path, as leanlm)."""
    return None if attention_mask is None or bool(attention_mask.all()) else attention_mask.bool()


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x):
        return self.output(F.relu(self.intermediate(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attention = ATTENTION[config.attention](config, causal=False)
        self.self_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, mask):
        x = self.self_attention_norm(x + self.dropout(self.self_attention(x, mask)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention (no padding mask: a target's pads come after its tokens), cross-attention to the
    encoder's output (its padding masked), feed-forward."""

    def __init__(self, config):
        super().__init__()
        self.self_attention = ATTENTION[config.attention](config, causal=True)
        self.self_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attention = ATTENTION[config.attention](config, causal=False)
        self.cross_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, memory, memory_mask):
        x = self.self_attention_norm(x + self.dropout(self.self_attention(x, None)))
        x = self.cross_attention_norm(x + self.dropout(self.cross_attention(x, memory_mask, memory=memory)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Stack(nn.Module):
    """The encoder's or the decoder's blocks (the model embeds and runs them: the embedding is shared)."""

    main_input_name = "input_ids"  # what generate() asks of a model's ``encoder``

    def __init__(self, layer, n):
        super().__init__()
        self.layers = nn.ModuleList(layer() for _ in range(n))


class EncoderView:
    """What ``generate()`` asks ``get_encoder()`` for: the source ids to the encoder's output (the embedding
    is the model's, shared with the decoder, so the view holds the model rather than a module of its own)."""

    def __init__(self, model):
        self.model = model

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return BaseModelOutput(last_hidden_state=self.model.encode(input_ids, attention_mask))

    __call__ = forward


class LeanTransformerForSeq2SeqLM(PreTrainedModel, GenerationMixin):
    config_class = LeanTransformerConfig
    _tied_weights_keys = {"lm_head.weight": "embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = Stack(lambda: EncoderLayer(config), config.n_layers)
        self.decoder = Stack(lambda: DecoderLayer(config), config.n_decoder_layers)
        self.dropout = nn.Dropout(config.dropout)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):  # for what a checkpoint does not hold
        init_normal_and_layer_norm(module, self.config.initializer_range)

    def get_input_embeddings(self):
        return self.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def get_encoder(self, modality=None):
        return EncoderView(self)

    def embed(self, ids):
        """Token vector x sqrt(d_model) + the position's sinusoid, then dropout."""
        table = sinusoidal_positions(ids.size(1), self.config.d_model).to(ids.device, self.embed_tokens.weight.dtype)
        return self.dropout(self.embed_tokens(ids) * math.sqrt(self.config.d_model) + table[None])

    def encode(self, input_ids, attention_mask=None):
        mask = padding(attention_mask)
        x = self.embed(input_ids)
        for layer in self.encoder.layers:
            x = layer(x, mask)
        return x

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, labels=None,
                encoder_outputs=None, **kwargs):
        if decoder_input_ids is None and labels is not None:  # <s> + the target, from labels (target + </s>)
            start = labels.new_full((labels.size(0), 1), self.config.decoder_start_token_id)
            decoder_input_ids = torch.cat([start, labels[:, :-1].masked_fill(labels[:, :-1] < 0, self.config.pad_token_id)], 1)
        if encoder_outputs is None:
            memory = self.encode(input_ids, attention_mask)
        else:
            memory = encoder_outputs[0]
        x = self.embed(decoder_input_ids)
        for layer in self.decoder.layers:
            x = layer(x, memory, padding(attention_mask))
        logits = self.lm_head(x)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory)
