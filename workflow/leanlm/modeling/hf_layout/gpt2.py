"""leanlm's GPT-2 decoder (ch. 3, MHA) in transformers' GPT-2 layout (``GPT2LMHeadModel``,
``GPT2ForSequenceClassification``).

The math is GPT-2's: learned token + position embeddings from position 0, pre-LN blocks
(``ln_1 -> attn -> + -> ln_2 -> mlp -> +``), softmax attention scaled by 1/sqrt(head_dim), the tanh GELU,
a final LayerNorm, the output matrix tied to the token embedding (or a separate ``lm_head``), and for
classification a bias-free ``score`` on the last real token. The layouts differ in two ways:

- our Q, K and V are three ``nn.Linear``; GPT-2's ``c_attn`` is one ``Conv1D`` holding the three side by
  side, and a ``Conv1D`` stores its weight as (in, out), the transpose of ``nn.Linear``'s;
- ``activation_function`` is ``gelu_pytorch_tanh`` (``F.gelu(approximate="tanh")``, what leanlm computes)
  rather than GPT-2's ``gelu_new``, the same function written out, which differs by float rounding only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.errors import LeanLMError
from leanlm.modeling.checkpoint import model_kind
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import Rule, Target, check_fields, only
from leanlm.modeling.vocab import unpadded_state_dict


def _conv1d(weight: torch.Tensor) -> torch.Tensor:
    """An nn.Linear weight (out, in) as a transformers Conv1D weight (in, out)."""
    return weight.t().contiguous()


def _layer(state: dict[str, torch.Tensor], src: str, dst: str, used: set[str]) -> dict[str, torch.Tensor]:
    def take(key: str) -> torch.Tensor:
        used.add(src + key)
        return state[src + key]

    qkv = ("attention.query", "attention.key", "attention.value")
    return {
        dst + "ln_1.weight": take("attention_norm.weight"),
        dst + "ln_1.bias": take("attention_norm.bias"),
        dst + "attn.c_attn.weight": _conv1d(torch.cat([take(f"{p}.weight") for p in qkv])),
        dst + "attn.c_attn.bias": torch.cat([take(f"{p}.bias") for p in qkv]),
        dst + "attn.c_proj.weight": _conv1d(take("attention.output.weight")),
        dst + "attn.c_proj.bias": take("attention.output.bias"),
        dst + "ln_2.weight": take("mlp_norm.weight"),
        dst + "ln_2.bias": take("mlp_norm.bias"),
        dst + "mlp.c_fc.weight": _conv1d(take("intermediate.weight")),
        dst + "mlp.c_fc.bias": take("intermediate.bias"),
        dst + "mlp.c_proj.weight": _conv1d(take("output.weight")),
        dst + "mlp.c_proj.bias": take("output.bias"),
    }


def hf_gpt2(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of a leanlm GPT-2 (causal LM or classifier)."""
    config: ModelConfig = model.config
    kind = model_kind(model)
    cls = check_fields(config, GPT2, kind, where)
    state = {k: v.detach().to("cpu") for k, v in unpadded_state_dict(model).items()}
    used: set[str] = set()

    def take(key: str) -> torch.Tensor:
        used.add(key)
        return state[key]

    hf = {"transformer.wte.weight": take("decoder.token_embeddings.weight"),
          "transformer.wpe.weight": take("decoder.position_embeddings.weight"),
          "transformer.ln_f.weight": take("decoder.final_norm.weight"),
          "transformer.ln_f.bias": take("decoder.final_norm.bias")}
    for i in range(config.n_layers):
        hf.update(_layer(state, f"decoder.layers.{i}.", f"transformer.h.{i}.", used))
    if "lm_head.weight" in state:  # untied output matrix (tie_word_embeddings: false)
        hf["lm_head.weight"] = take("lm_head.weight")
    if "score.weight" in state:
        hf["score.weight"] = take("score.weight")
    left = sorted(set(state) - used)
    if left:
        raise LeanLMError(f"{where}: no GPT-2 name for parameter(s) {left}; the exporter does not know these layers")
    return _config_fields(config, cls, getattr(model, "num_labels", None)), {
        k: v.contiguous() for k, v in hf.items()}


def _config_fields(config: ModelConfig, cls: str, num_labels: int | None) -> dict[str, Any]:
    hf: dict[str, Any] = {
        "model_type": "gpt2",
        "architectures": [cls],
        "vocab_size": config.vocab_size,
        "n_positions": config.max_position,
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "n_inner": config.d_ff,
        "activation_function": "gelu_pytorch_tanh",
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": config.tie_word_embeddings,
        "pad_token_id": config.pad_token_id,  # the classifier finds each row's last token by it
    }
    if num_labels is not None:
        hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        hf["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
        if num_labels == 1:
            hf["problem_type"] = "regression"
    return hf


GPT2 = Target(
    backbone="gpt2",
    family="GPT-2",
    classes={"causal_lm": "GPT2LMHeadModel", "classification": "GPT2ForSequenceClassification"},
    carried=frozenset({"vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_position", "dropout",
                       "attention_dropout", "layer_norm_eps", "pad_token_id", "initializer_range",
                       "tie_word_embeddings", "pad_vocab_to"}),
    # The decoder reads none of these: no token types, always a learned position table, no RoPE or layouts.
    unused=frozenset({"type_vocab_size", "positions", "rope_theta", "layout"}),
    pinned={
        "head_dim": Rule(lambda v, c: c.n_heads * v == c.d_model,
                         "GPT-2 derives its head size as n_embd / n_head, so n_heads * head_dim must equal d_model"),
        "attention": only("mha", says="GPT-2 has softmax multi-head attention only; ch. 3's other variants "
                                      "(MHE, SHA, MQA, ...) have no stock class"),
        "embedding": only("standard", says="GPT-2 has one token-embedding table"),
        "embedding_options": only({}, says="they configure a non-standard embedding"),
        "position_offset": only(0, says="GPT-2 numbers positions from 0"),
        "n_kv_heads": Rule(lambda v, c: v in (0, c.n_heads), "GPT-2 has as many key/value heads as query heads"),
        "qk_norm": only(False, says="GPT-2 has no q/k normalisation"),
        "n_decoder_layers": only(0, says="an encoder-decoder's decoder has no place in GPT-2"),
    },
    build=hf_gpt2,
)
