"""ch. 4's Standard decoder in transformers' Qwen2 layout (``Qwen2ForCausalLM``), or Qwen3's
(``Qwen3ForCausalLM``) when it has q/k norms (``qk_norm``, the 1.7B).

A leanlm Qwen decoder whose every layer is standard attention (``attention: standard``; the layout then
changes nothing) is Qwen2.5 parameter for parameter, under Qwen2's own names (leanlm.modeling.qwen):
RMSNorm pre-norm blocks, QKV bias, RoPE, MHA or GQA (``n_kv_heads``), SwiGLU, the head tied or not. What
stays behind: the padded vocabulary rows (Qwen2's tables have ``vocab_size`` rows) and, when tied,
``lm_head.weight`` (transformers ties it to the embedding itself). Residual dropout, which Qwen2 has not,
is off at inference; fine-tuning the export in transformers would train without it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.modeling.checkpoint import model_kind
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import Rule, Target, check_fields, only
from leanlm.modeling.vocab import unpadded_state_dict


def qwen2_config_fields(config: ModelConfig) -> dict[str, Any]:
    """``transformers.Qwen2Config`` keyword arguments of a standard leanlm Qwen decoder."""
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_position,
        "initializer_range": config.initializer_range,
        "rms_norm_eps": config.layer_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "use_sliding_window": False,
        "attention_dropout": config.attention_dropout,
        "use_cache": False,
    }


def qwen2_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights of a standard leanlm Qwen decoder by Qwen2's names (ours already), the padded vocabulary
    rows and a tied ``lm_head.weight`` left out."""
    tensors = {k: v.detach().to("cpu") for k, v in unpadded_state_dict(model).items()}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return tensors


def hf_qwen2(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of ch. 4's Standard decoder as a Qwen2."""
    config: ModelConfig = model.config
    cls = check_fields(config, QWEN2, model_kind(model), where)
    fields = {"model_type": "qwen2", "architectures": [cls], **qwen2_config_fields(config),
              "use_cache": True}  # the export serves inference and generation; the twins train without a cache
    return fields, {k: v.contiguous() for k, v in qwen2_tensors(model).items()}


QWEN2 = Target(
    backbone="qwen",
    family="Qwen2",
    classes={"causal_lm": "Qwen2ForCausalLM"},
    carried=frozenset({"vocab_size", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "max_position",
                       "attention_dropout", "layer_norm_eps", "initializer_range", "rope_theta",
                       "tie_word_embeddings", "pad_vocab_to"}),
    # The decoder reads none of these: no token types or position table, no pad-token row; residual
    # dropout is off at inference (see the module docstring); with standard attention in every layer the
    # layout only says which layers are "standard".
    unused=frozenset({"type_vocab_size", "positions", "position_offset", "pad_token_id", "dropout", "layout"}),
    pinned={
        "head_dim": Rule(lambda v, c: c.n_heads * v == c.d_model,
                         "Qwen2 derives its head size as hidden_size / num_attention_heads, so n_heads * head_dim "
                         "must equal d_model"),
        "attention": only("standard", "mha", says="Qwen2 has standard softmax attention in every layer; ch. 4's "
                                                  "simple mixers have no stock class"),
        "qk_norm": only(False, says="qk_norm=True is Qwen3's q/k RMSNorm, which Qwen2 does not have"),
        "embedding": only("standard", says="Qwen2 has one token-embedding table"),
        "embedding_options": only({}, says="they configure a non-standard embedding"),
        "n_decoder_layers": only(0, says="an encoder-decoder's decoder has no place in Qwen2"),
    },
    build=hf_qwen2,
)


def hf_qwen3(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of a Standard decoder with ``qk_norm`` (the 1.7B
    of ch. 4) as a Qwen3: per-head RMSNorm on Q and K before RoPE, no QKV bias (leanlm drops it with qk_norm,
    as Qwen3 does), the head size given explicitly; the names are Qwen2's plus ``q_norm`` / ``k_norm``."""
    config: ModelConfig = model.config
    cls = check_fields(config, QWEN3, model_kind(model), where)
    fields = {**qwen2_config_fields(config), "model_type": "qwen3", "architectures": [cls],
              "head_dim": config.head_dim, "attention_bias": False, "sliding_window": None, "use_cache": True}
    return fields, {k: v.contiguous() for k, v in qwen2_tensors(model).items()}


QWEN3 = Target(
    backbone="qwen",
    family="Qwen3",
    classes={"causal_lm": "Qwen3ForCausalLM"},
    carried=QWEN2.carried | {"head_dim"},  # Qwen3's config has head_dim
    unused=QWEN2.unused,
    pinned={**{k: v for k, v in QWEN2.pinned.items() if k not in ("qk_norm", "head_dim")},
            "qk_norm": only(True, says="Qwen3 always normalises q and k (qk_norm=False is a Qwen2)")},
    build=hf_qwen3,
)
