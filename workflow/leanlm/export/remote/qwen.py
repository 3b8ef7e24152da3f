"""Ch. 4's decoder with any of its token mixers, in any layout, as ``modeling_leanlm_qwen.py``'s
``LeanQwenForCausalLM`` (``trust_remote_code``): the models with no stock class (Qwen2 has standard
attention in every layer; ch. 4's Standard decoder still exports as a stock Qwen2 / Qwen3).

``config.json`` holds every leanlm model field under its own name, plus what the modeling file reads
instead of leanlm's registries: the mixer of each layer (``layer_kinds``, from the layout), the simple
mixer's name, the fixed Q/K stream it needs (``qk_stream``) and the MLP mixer's width. The weights keep
leanlm's names (Qwen2's), with the fixed sequence of RndEmbQK / FixedSeqQK as a tensor beside them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.export.remote.files import CONFIG_FILE, leanlm_fields
from leanlm.modeling.checkpoint import model_kind
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import Rule, Target, check_fields
from leanlm.modeling.hf_layout.qwen2 import QWEN2
from leanlm.modeling.vocab import unpadded_state_dict

MODELING = "modeling_leanlm_qwen"
CLASS = "LeanQwenForCausalLM"


def _template_mixers() -> set[str]:
    """The mixers the template implements (its MIXERS table), read from the template itself."""
    from leanlm.export.remote import modeling_leanlm_qwen

    return set(modeling_leanlm_qwen.MIXERS)


def hf_leanlm_qwen(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights)`` of a leanlm Qwen decoder for ``LeanQwenForCausalLM``."""
    from leanlm.modeling.qwen import simple_mixer_name

    config: ModelConfig = model.config
    cls = check_fields(config, LEANLM_QWEN, model_kind(model), where)
    backbone = model.model
    if backbone.qk_stream == "text" and bool((backbone.fixed_token_ids < 0).any()):
        raise ConfigError(f"{where}: FixedSeqQK's fixed text is not set (model.set_fixed_sequence), so the "
                          f"model has no queries and keys to export; nothing was written")
    widths = {layer.self_attn.width for layer in backbone.layers if hasattr(layer.self_attn, "width")}
    fields = {**leanlm_fields(config, "causal_lm", MODELING, cls), "kv_heads": config.kv_heads, "layer_kinds": list(model.layer_kinds),
              "simple_mixer": simple_mixer_name(config), "qk_stream": backbone.qk_stream,
              "mlp_mixer_width": widths.pop() if widths else None,
              "skip_layers": sorted(model.skip_layers), "use_cache": False}
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in unpadded_state_dict(model).items()}
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return fields, tensors


LEANLM_QWEN = Target(
    backbone="qwen",
    family="leanlm Qwen (trust_remote_code)",
    classes={"causal_lm": CLASS},
    # Everything Qwen2 carries, and what it pins: every ch. 4 mixer and q/k norms are the template's own.
    carried=QWEN2.carried | {"head_dim", "qk_norm"},
    unused=QWEN2.unused,
    pinned={**{k: v for k, v in QWEN2.pinned.items() if k not in ("attention", "qk_norm", "head_dim")},
            "attention": Rule(lambda v, _c: ("standard" if v == "mha" else v) in _template_mixers(),
                              f"{MODELING}.py implements the ch. 4 mixers in its MIXERS table only")},
    build=hf_leanlm_qwen,
    code=(CONFIG_FILE, f"{MODELING}.py"),
)
