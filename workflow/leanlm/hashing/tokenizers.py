"""Which runs hash their tokens (ch. 2): the codebook tokenizers, and the check that a hash embedding and a
hash tokenizer come together. Apart from :mod:`leanlm.hashing.inputs` so that the profile's checks
(:mod:`leanlm.config`) need only the model library, not the data path.
"""

from __future__ import annotations

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hash_features import embedding_features

HASH_TOKENIZERS = ("hash", "hash_subword")


def uses_codebook(run) -> bool:
    return run.tokenizer in HASH_TOKENIZERS


def check_run_tokenizer(run, config: ModelConfig) -> None:
    """A hash embedding needs a hash tokenizer and a hash tokenizer a hash embedding (ConfigError)."""
    hashed = bool(embedding_features(config))
    if hashed and not uses_codebook(run):
        raise ConfigError(f"run {run.run_id}: embedding {config.embedding!r} reads hash features, so its "
                          f"tokenizer must be one of {HASH_TOKENIZERS}, not {run.tokenizer!r}")
    if uses_codebook(run) and not hashed:
        raise ConfigError(f"run {run.run_id}: tokenizer {run.tokenizer!r} makes codebook rows, which "
                          f"embedding {config.embedding!r} cannot read; use a hash embedding or "
                          f"tokenizer: profile")
