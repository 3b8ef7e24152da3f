"""Ch. 3's BERT encoder and GPT-2 decoder with any of its attention variants (MHE-ADD/MUL, SHA, EL-ATT, MQA,
SKV, GQA, FNet, Linear) as ``modeling_leanlm_ch3.py``'s classes (``trust_remote_code``): the variants with no
stock class (MHA with a standard embedding still exports as a stock BERT / GPT-2). Also what stock BERT
cannot number: sinusoidal positions, RoBERTa-style ``position_offset``, no token-type table; and ch. 2's
word embeddings without a table per token (``modeling_leanlm_hash.py``; what computes their inputs from
text ships beside them, leanlm.export.remote.hash_inputs). BERT's heads: MLM, sequence classification and ch. 2's
Shuffle+Random (token classification, either of its heads); ``AutoModel`` loads the encoder without its head
(``LeanBertModel``). The attention variants are ``modeling_leanlm_attention.py``.

``config.json`` holds every leanlm model field under its own name; the weights keep leanlm's names, the
padded vocabulary rows and the tied heads left out (transformers ties them again).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.export.remote.files import CONFIG_FILE, leanlm_fields
from leanlm.export.remote.hash_inputs import fields_of
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import (SHUFFLE_RANDOM_OFFICIAL, Rule, Target, check_fields, export_kind,
                                              label_fields, only)
from leanlm.modeling.vocab import unpadded_state_dict

MODELING = "modeling_leanlm_ch3"
# imported by MODELING: ship with every ch. 3 export
ATTENTION_MODELING, HASH_MODELING = "modeling_leanlm_attention", "modeling_leanlm_hash"
BASE_MODELS = {"bert": "LeanBertModel"}  # AutoModel: the encoder without its head
# The head a tied weight belongs to, by backbone: transformers ties it to the word embedding again.
TIED = {"bert": "decoder.weight", "gpt2": "lm_head.weight"}


def _template_embeddings() -> set[str]:
    """The word embeddings the hash template implements (its EMBEDDINGS table), and BERT's table."""
    from leanlm.export.remote import modeling_leanlm_hash

    return set(modeling_leanlm_hash.EMBEDDINGS) | {"standard"}


def _template_attention() -> set[str]:
    """The attention variants the template implements (its ATTENTION table), read from the template."""
    from leanlm.export.remote import modeling_leanlm_attention

    return set(modeling_leanlm_attention.ATTENTION)


def hf_leanlm_ch3(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights)`` of a leanlm BERT or GPT-2 model for the template's class."""
    config: ModelConfig = model.config
    kind = export_kind(model)
    target = REMOTE_CH3[config.backbone]
    cls = check_fields(config, target, kind, where)
    fields = {**leanlm_fields(config, kind, MODELING, cls, label_fields(model), BASE_MODELS.get(config.backbone)),
              **fields_of(config)}
    if kind.startswith("shuffle_random"):  # which of its two heads (leanlm.modeling.shuffle_random)
        fields["shuffle_random_head"] = model.head_type
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in unpadded_state_dict(model).items()}
    if config.backbone == "bert" and hasattr(model.encoder.embeddings.word_embeddings, "hash_seeds"):
        # EELBERT's fixed seeds: leanlm regenerates them from embedding_options.seed (NumPy's PCG64); the
        # export ships them, so the template needs no NumPy and no generator that may change between versions
        tensors["encoder.embeddings.word_embeddings.hash_seeds"] = model.encoder.embeddings.word_embeddings.hash_seeds
    if kind in ("mlm", "causal_lm"):
        fields["tie_word_embeddings"] = tied = _tied(model)
        if tied:
            tensors.pop(TIED[config.backbone], None)
    return fields, tensors


def _tied(model: nn.Module) -> bool:
    """Whether the LM head is the word embedding (BERT's always is with a standard table; GPT-2's when
    it has no ``lm_head`` of its own)."""
    if model.config.backbone == "bert":  # a hash embedding has no table: the decoder is a matrix of its own
        return model.decoder.weight is getattr(model.encoder.embeddings.word_embeddings, "weight", None)
    return model.lm_head is None


CODE = (CONFIG_FILE, f"{MODELING}.py", f"{ATTENTION_MODELING}.py", f"{HASH_MODELING}.py")
SIZES = frozenset({"vocab_size", "n_layers", "d_model", "n_heads", "head_dim", "d_ff", "max_position", "dropout",
                   "attention_dropout", "layer_norm_eps", "pad_token_id", "initializer_range", "pad_vocab_to",
                   "position_offset", "n_kv_heads"})
PINNED = {
    "attention": Rule(lambda v, _c: v in _template_attention(),
                      f"{ATTENTION_MODELING}.py implements the ch. 3 attention variants in its ATTENTION table only"),
    "embedding": Rule(lambda v, c: v in (_template_embeddings() if c.backbone == "bert" else {"standard"}),
                      f"{HASH_MODELING}.py implements the ch. 2 embeddings in its EMBEDDINGS table only, for BERT"),
    # The embedding's settings, read with its defaults filled in (hash_inputs.embedding_options).
    "embedding_options": Rule(lambda v, c: c.embedding != "standard" or v == {},
                              "they configure a non-standard embedding"),
    "qk_norm": only(False, says="ch. 3's backbones have no q/k normalisation"),
    "n_decoder_layers": only(0, says="the encoder-decoder is another backbone"),
}
LEANLM_BERT = Target(
    backbone="bert",
    family="leanlm BERT (trust_remote_code)",
    # ch. 2's Shuffle+Random as token classification, either head (stock BERT's token classifier takes the
    # official code's head where the rest of the model is stock).
    classes={"mlm": "LeanBertForMaskedLM", "classification": "LeanBertForSequenceClassification",
             "shuffle_random": "LeanBertForTokenClassification",
             SHUFFLE_RANDOM_OFFICIAL: "LeanBertForTokenClassification"},
    carried=SIZES | {"type_vocab_size", "positions"},
    # RoPE and ch. 4's layouts are the Qwen decoder's; BERT's MLM head is always tied to a standard table.
    unused=frozenset({"rope_theta", "layout", "tie_word_embeddings"}),
    pinned=PINNED,
    build=hf_leanlm_ch3,
    code=CODE,
)
LEANLM_GPT2 = Target(
    backbone="gpt2",
    family="leanlm GPT-2 (trust_remote_code)",
    classes={"causal_lm": "LeanGPT2ForCausalLM", "classification": "LeanGPT2ForSequenceClassification"},
    carried=SIZES | {"tie_word_embeddings"},
    # The GPT-2 decoder has no token types and always a learned position table.
    unused=frozenset({"rope_theta", "layout", "type_vocab_size", "positions"}),
    pinned=PINNED,
    build=hf_leanlm_ch3,
    code=CODE,
)
REMOTE_CH3 = {"bert": LEANLM_BERT, "gpt2": LEANLM_GPT2}
