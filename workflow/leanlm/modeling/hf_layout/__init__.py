"""leanlm models in ``transformers``' layout, in memory: the stock class a model is, its ``config.json``
fields and its weights under Hugging Face's names.

One :class:`~leanlm.modeling.hf_layout.fields.Target` per backbone that has a stock class:

==========  ==========================  ==============================================================
backbone    heads (checkpoint kind)     transformers class
==========  ==========================  ==============================================================
bert        mlm, classification,        BertForMaskedLM, BertForSequenceClassification,
            shuffle_random (official    BertForTokenClassification (MHA only)
            code's head)
gpt2        causal_lm, classification   GPT2LMHeadModel, GPT2ForSequenceClassification (MHA only)
qwen        causal_lm                   Qwen2ForCausalLM (ch. 4's Standard decoder), Qwen3ForCausalLM
                                        when it has q/k norms (qk_norm, the 1.7B)
==========  ==========================  ==============================================================

:func:`hf_layout` checks every config field first (:func:`~leanlm.modeling.hf_layout.fields.check_fields`)
and refuses, naming the field, what the class cannot express. The same maps build the ``transformers``
twins of the GPU check (leanlm.modeling.hf_twins) and the files ``leanlm export-hf`` writes (leanlm.export).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.bert import BERT, hf_bert
from leanlm.modeling.hf_layout.fields import Target, check_fields, export_kind
from leanlm.modeling.hf_layout.gpt2 import GPT2, hf_gpt2
from leanlm.modeling.hf_layout.qwen2 import QWEN2, QWEN3, hf_qwen2, hf_qwen3

TARGETS: dict[str, Target] = {t.backbone: t for t in (BERT, GPT2, QWEN2)}
# Ch. 4's Standard decoder with q/k norms (the 1.7B) is a Qwen3 rather than a Qwen2.
QK_NORM_TARGETS: dict[str, Target] = {"qwen": QWEN3}
# Backbones with no stock class, and why (messages of the refusal).
NO_STOCK_CLASS = {
    "transformer": "the Vaswani encoder-decoder (ch. 3's translation model) has no stock transformers class "
                   "with its layout; it is not yet exportable",
}


def target_of(config: ModelConfig, kind: str, where: str) -> tuple[Target, str]:
    """The target and transformers class a ``kind`` model of ``config`` exports to; ConfigError naming the
    backbone, head or field that has none."""
    target = (QK_NORM_TARGETS if config.qk_norm else TARGETS).get(config.backbone, TARGETS.get(config.backbone))
    if target is None:
        reason = NO_STOCK_CLASS.get(config.backbone, "it has no stock transformers class")
        raise ConfigError(f"{where}: backbone={config.backbone!r} cannot be exported: {reason}")
    return target, check_fields(config, target, kind, where)


def hf_layout(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of ``model`` (ConfigError when its backbone,
    head or a config field has no stock transformers equivalent)."""
    target, _cls = target_of(model.config, export_kind(model), where)
    return target.build(model, where)


__all__ = ["TARGETS", "QK_NORM_TARGETS", "target_of", "hf_layout", "hf_bert", "hf_gpt2", "hf_qwen2", "hf_qwen3"]
