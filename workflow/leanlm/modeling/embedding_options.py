"""A word embedding's settings (``config.embedding_options``) read against the variant's ``defaults``.

Torch-free, apart from the embedding classes: planning and the data side check a model's settings without
importing the model library (leanlm.modeling.hash_features, leanlm.runs).
"""

from __future__ import annotations

from typing import Any, Mapping

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig


def read_options(config: ModelConfig, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``config.embedding_options`` over ``defaults``; a key the variant does not have is an error."""
    given = dict(config.embedding_options)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        allowed = ", ".join(f"{k} (default {v!r})" for k, v in defaults.items()) or "none"
        raise ConfigError(f"model config: embedding_options {unknown} are not settings of embedding "
                          f"{config.embedding!r}; its settings: {allowed}")
    return {**defaults, **given}


def positive_int(options: Mapping[str, Any], key: str, config: ModelConfig) -> int:
    value = options[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"model config: embedding_options.{key}={value!r} of embedding "
                          f"{config.embedding!r} must be a positive integer")
    return value
