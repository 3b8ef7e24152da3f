"""leanlm's BERT (MLM and sequence classification, MHA) in transformers' BERT layout.

Parameter for parameter our MHA encoder is ``transformers.BertModel``: only the names differ
(:data:`RENAMES`); the MLM decoder is tied to the word embeddings as in BERT, its bias is
``cls.predictions.bias``. The padded vocabulary rows (leanlm.modeling.vocab) stay behind: Hugging Face's
tables have ``vocab_size`` rows.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from leanlm.errors import LeanLMError
from leanlm.modeling.checkpoint import deduplicated_state
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import SHUFFLE_RANDOM_OFFICIAL, Rule, Target, check_fields, export_kind, label_fields, only
from leanlm.modeling.vocab import unpadded_state_dict

# Our parameter names -> Hugging Face BERT's, first match wins.
RENAMES: list[tuple[str, str]] = [
    (r"^encoder\.embeddings\.norm\.", "bert.embeddings.LayerNorm."),
    (r"^encoder\.embeddings\.", "bert.embeddings."),
    (r"^encoder\.layers\.(\d+)\.attention\.(query|key|value)\.", r"bert.encoder.layer.\1.attention.self.\2."),
    (r"^encoder\.layers\.(\d+)\.attention\.output\.", r"bert.encoder.layer.\1.attention.output.dense."),
    (r"^encoder\.layers\.(\d+)\.attention_norm\.", r"bert.encoder.layer.\1.attention.output.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.intermediate\.", r"bert.encoder.layer.\1.intermediate.dense."),
    (r"^encoder\.layers\.(\d+)\.output\.", r"bert.encoder.layer.\1.output.dense."),
    (r"^encoder\.layers\.(\d+)\.output_norm\.", r"bert.encoder.layer.\1.output.LayerNorm."),
    (r"^encoder\.pooler\.dense\.", "bert.pooler.dense."),
    (r"^transform\.dense\.", "cls.predictions.transform.dense."),
    (r"^transform\.norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^decoder\.bias$", "cls.predictions.bias"),
    (r"^classifier\.", "classifier."),
]


def hf_name(key: str) -> str:
    for pattern, replacement in RENAMES:
        new, count = re.subn(pattern, replacement, key)
        if count:
            return new
    raise KeyError(f"no Hugging Face BERT name for parameter {key!r}")


def _heads_fit(value: int, config: ModelConfig) -> bool:
    return config.n_heads * config.head_dim == config.d_model


def _config_fields(config: ModelConfig, cls: str, labels: dict[str, Any]) -> dict[str, Any]:
    hf: dict[str, Any] = {
        "model_type": "bert",
        "architectures": [cls],
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "intermediate_size": config.d_ff,
        "hidden_act": "gelu",  # the exact (erf) GELU, as leanlm's encoder and MLM transform
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        **labels,
    }
    return hf


def hf_bert(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of a BERT model (MLM or classifier) in
    Hugging Face BERT's layout, in memory: what the export writes (leanlm.export), and what the GPU
    check's ``transformers`` twin is built from (:mod:`leanlm.modeling.hf_twins`)."""
    config: ModelConfig = model.config
    cls = check_fields(config, BERT, export_kind(model), where)
    tensors, _ = deduplicated_state(model, unpadded_state_dict(model))
    try:
        hf_tensors = {hf_name(k): v for k, v in tensors.items() if k != "decoder.weight"}
    except KeyError as err:
        raise LeanLMError(f"{where}: {err.args[0]}; the exporter does not know this layer") from None
    return _config_fields(config, cls, label_fields(model)), hf_tensors


BERT = Target(
    backbone="bert",
    family="BERT",
    # Shuffle+Random with the official code's head (dropout + linear on every token) is BERT's token classifier.
    classes={"mlm": "BertForMaskedLM", "classification": "BertForSequenceClassification",
             SHUFFLE_RANDOM_OFFICIAL: "BertForTokenClassification"},
    carried=frozenset({"vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_position", "dropout",
                       "attention_dropout", "layer_norm_eps", "pad_token_id", "initializer_range",
                       "pad_vocab_to"}),  # padding: the export writes the real rows only
    # The encoder reads none of these (RoPE, ch. 4 layouts; the MLM decoder is always tied to a standard table).
    unused=frozenset({"rope_theta", "layout", "tie_word_embeddings"}),
    pinned={
        "head_dim": Rule(_heads_fit, "BERT derives its head size as hidden_size / num_attention_heads, so "
                                     "n_heads * head_dim must equal d_model"),
        "type_vocab_size": Rule(lambda v, _c: v > 0, "BERT always has a token-type table (1 row or more)"),
        "attention": only("mha", says="BERT has softmax multi-head attention only; ch. 3's other variants "
                                      "(MHE, SHA, MQA, ...) have no stock class"),
        "embedding": only("standard", says="BERT has one word-embedding table; hash and projection embeddings "
                                           "(ch. 2) compute token vectors it cannot, and transformers would "
                                           "initialise the table at random"),
        "embedding_options": only({}, says="they configure a non-standard embedding"),
        "positions": only("learned", says="BERT has a learned position table, not fixed sinusoids"),
        "position_offset": only(0, says="BERT numbers positions from 0 (RoBERTa-style offsets do not map)"),
        "n_kv_heads": Rule(lambda v, c: v in (0, c.n_heads), "BERT has as many key/value heads as query heads"),
        "qk_norm": only(False, says="BERT has no q/k normalisation"),
        "n_decoder_layers": only(0, says="an encoder-decoder's decoder has no place in BERT"),
    },
    build=hf_bert,
)
