"""The model registry: one class per (backbone, head), built by name from a :class:`ModelConfig`.

    model = build_model(config, "classification", num_labels=3)   # config.backbone picks the class

Heads (the ``head`` names used across the pipeline and in checkpoints' ``kind``):

- ``mlm``: masked LM (BERT); ``shuffle_random``: ch. 2's token-level 3-way objective;
- ``causal_lm``: next-token LM (GPT-2, Qwen); ``seq2seq``: translation (Vaswani);
- ``classification``: sequence classification / regression (``num_labels``; 1 = regression);
- ``qa``: SQuAD span extraction.

A model class registers with ``@register_model(backbone, head)`` and follows one protocol:

- ``__init__(config, **head_kwargs)``; ``self.config`` is the ModelConfig;
- ``forward(**batch) -> {"loss": Tensor | None, "logits": Tensor}`` (loss only with labels);
- ``takes_return_logits = True`` on a model whose ``forward`` takes ``return_logits=False`` and then
  returns the loss alone (logits None), computed without holding the whole logits (the LM heads,
  leanlm.modeling.lm_loss): what the training step and validation losses ask (:func:`loss_only_kwargs`);
- ``backbone_prefix``: the state-dict prefix of the part a fine-tuning model takes over from its
  pretrained model (e.g. ``"encoder."``); ``fresh_prefixes``: parts of that backbone a pretrained
  model may lack and that keep their fresh init (BERT's pooler: MLM pretraining has none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from leanlm.errors import ConfigError, TrainingError
from leanlm.registry import Registry

MODELS: Registry[type[nn.Module]] = Registry("model (backbone:head)")


def model_key(backbone: str, head: str) -> str:
    return f"{backbone}:{head}"


def register_model(backbone: str, head: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register ``cls`` as the ``head`` model of ``backbone``."""
    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        cls.head = head
        return MODELS.register(model_key(backbone, head))(cls)

    return deco


def heads_of(backbone: str) -> list[str]:
    return [name.split(":", 1)[1] for name in MODELS.names() if name.startswith(backbone + ":")]


def model_class(backbone: str, head: str) -> type[nn.Module]:
    _import_all()
    key = model_key(backbone, head)
    if key not in MODELS:
        raise ConfigError(f"backbone {backbone!r} has no {head!r} model; its heads: "
                          f"{', '.join(heads_of(backbone)) or 'none'}")
    return MODELS.get(key)


def build_model(config, head: str, **head_kwargs: Any) -> nn.Module:
    """Instantiate the ``head`` model of ``config.backbone``."""
    return model_class(config.backbone, head)(config, **head_kwargs)


def loss_only_kwargs(model: nn.Module) -> dict[str, bool]:
    """The keyword arguments that make ``model`` compute its loss alone: ``{"return_logits": False}``
    for a model that takes it (``takes_return_logits``), else none."""
    return {"return_logits": False} if getattr(type(model), "takes_return_logits", False) else {}


def head_of(model: nn.Module) -> str:
    head = getattr(type(model), "head", None)
    if head is None:
        raise TypeError(f"{type(model).__name__} is not a registered model")
    return head


def transfer_backbone(model: nn.Module, pretrained: Mapping[str, torch.Tensor] | nn.Module) -> nn.Module:
    """Copy a pretrained model's backbone (``model.backbone_prefix``) into ``model``.

    Everything under the prefix must be present with the same shape, except ``fresh_prefixes``
    (kept at their fresh init). A mismatch means another architecture or variant: TrainingError
    listing the keys.
    """
    if isinstance(pretrained, nn.Module):
        pretrained = pretrained.state_dict()
    prefix = getattr(model, "backbone_prefix", "")
    fresh = tuple(prefix + p for p in getattr(model, "fresh_prefixes", ()))
    target = model.state_dict()
    wanted = {k for k in target if k.startswith(prefix)}
    state = {k: v for k, v in pretrained.items() if k in wanted}
    missing = sorted(k for k in wanted - set(state) if not k.startswith(fresh))
    wrong = sorted(k for k, v in state.items() if tuple(v.shape) != tuple(target[k].shape))
    if missing or wrong:
        raise TrainingError(
            f"pretrained weights do not fit {type(model).__name__} "
            f"(attention={model.config.attention!r}): missing {missing[:8]}, wrong shape {wrong[:8]}; "
            f"was it pretrained with another attention variant or size?"
        )
    model.load_state_dict(state, strict=False)
    return model


def _import_all() -> None:
    """Import the modules whose classes register themselves (late: they import this module)."""
    import importlib

    for module in ("leanlm.modeling.heads", "leanlm.modeling.decoder", "leanlm.modeling.seq2seq",
                   "leanlm.modeling.qa", "leanlm.modeling.multiple_choice",
                   "leanlm.modeling.shuffle_random", "leanlm.modeling.qwen"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:  # the module exists but something it imports is missing
                raise
