"""What every word embedding shares (the EMBEDDINGS registry's contract) and the hash embeddings' skeleton.

Shared code, no variant (as ``attention/base.py`` for ch. 3's attention): the variants are the files
``modeling/*_embeddings.py`` (leanlm.modeling.variants), each loaded when a model names one of its variants,
so a comment in one of them reruns only the runs that build it.

Every variant is ``Module(config)`` with ``forward(input_ids: LongTensor[B, L], **features) -> [B, L, d]``;
it reads its settings from ``config.embedding_options`` over its ``defaults`` (:func:`read_options`: a key
it does not have is an error when the config is validated, before any job) and declares the batch features
it needs in ``features`` (what they are and which codebook makes them: :mod:`leanlm.modeling.hash_features`).

:class:`HashEmbedding` is the skeleton of the embeddings without a table per token (the HashFormers,
:mod:`leanlm.modeling.hash_embeddings`; ProFormer and EELBERT, :mod:`leanlm.modeling.projection_embeddings`).
Each takes ``special_tokens`` [5]: ids below it are the codebook's fixed special rows ([PAD], [UNK], [CLS],
[SEP], [MASK]), embedded from a small table of their own that Appendix 2.8 does not count; every other id is
a regular token, and the HashFormers add one learned shared "regular token" vector to its hash embedding
(DESIGN §8: the official code's sixth special row of Pool, Add and Proj; with it the counts are exactly the
thesis's 99.1K / 197.4K / 797.2K). The official Emb has no such row (a plain 50,265-row word table); ours
gives Emb the vector too, so Emb (1K) has Pool's 1,038 rows. A special token gets its own row and no hash
part; the official Add also adds to every special token the same offset (its bit-0 vectors summed), see
docs/design-notes.md.

``embedding_parameter_count()`` on each variant is Appendix 2.8's #Emb: the parameters that retrieve
or generate token embeddings, special tokens and positions excluded.
"""

from __future__ import annotations

import abc
from typing import Any, Mapping

import torch
from torch import nn

from leanlm.errors import ConfigError, DataError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_options import positive_int, read_options
from leanlm.modeling.variants import Variant

# The hashes a codebook makes bits or buckets with (leanlm.hashing).
HASHES = ("md5", "lsh")


def batch_feature(features: Mapping[str, torch.Tensor], name: str, embedding: str) -> torch.Tensor:
    try:
        return features[name]
    except KeyError:
        raise DataError(
            f"embedding {embedding!r} needs the batch feature {name!r} (made by "
            f"leanlm.hashing.HashCodebook.features); the batch has {sorted(features) or 'no features'}"
        ) from None


def hash_bits_of(features: torch.Tensor, n_bits: int, name: str) -> torch.Tensor:
    """The ``hash_bits`` feature as floats, checked to have the ``n_bits`` bits embedding ``name`` was built for."""
    if features.size(-1) != n_bits:
        raise DataError(f"embedding {name!r} was built for {n_bits}-bit hashes but hash_bits has "
                        f"{features.size(-1)} bits; build the codebook with bits={n_bits}")
    return features if features.is_floating_point() else features.float()


class EmbeddingVariant(Variant):
    """The registry contract of a word embedding: its settings are ``config.embedding_options`` over
    ``defaults``; a key it does not have is an error when the config is validated, before any job."""

    defaults: dict[str, Any] = {}

    @classmethod
    def check_config(cls, config: ModelConfig, where: str = "model config") -> None:
        read_options(config, cls.defaults)


class HashEmbedding(EmbeddingVariant, nn.Module, abc.ABC):
    """Skeleton of the hash embeddings: special-token rows, the shared regular-token vector, and a
    variant's ``embed_hashed(*features)`` for every other token."""

    features: tuple[str, ...] = ("hash_bits",)
    defaults: dict[str, Any] = {"hash": "md5", "special_tokens": 5}
    learns_regular_token = True  # HashFormers do (DESIGN §8); ProFormer and EELBERT do not

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.name = config.embedding
        self.options = read_options(config, self.defaults)
        if "hash" in self.options and self.options["hash"] not in HASHES:
            raise ConfigError(f"model config: embedding_options.hash={self.options['hash']!r} must be "
                              f"one of {HASHES}")
        self.n_special = positive_int(self.options, "special_tokens", config)
        if not 0 <= config.pad_token_id < self.n_special:
            raise ConfigError(f"model config: pad_token_id={config.pad_token_id} must be one of the "
                              f"{self.n_special} special rows of a hash embedding (the codebook's "
                              f"[PAD] is 0)")
        self.d_model = config.d_model
        self.special_tokens = nn.Embedding(self.n_special, config.d_model, padding_idx=config.pad_token_id)
        self.regular_token = None
        if self.learns_regular_token:
            self.regular_token = nn.Parameter(torch.empty(config.d_model))
            nn.init.normal_(self.regular_token, 0.0, config.initializer_range)

    @abc.abstractmethod
    def embed_hashed(self, *features: torch.Tensor) -> torch.Tensor:
        """The embeddings of the hashed tokens from their hash features (named in ``features``)."""

    def forward(self, input_ids: torch.Tensor, **features: torch.Tensor) -> torch.Tensor:
        inputs = [batch_feature(features, name, self.name) for name in self.features]
        hashed = self.embed_hashed(*inputs)
        if self.regular_token is not None:
            hashed = hashed + self.regular_token
        special = (input_ids < self.n_special).unsqueeze(-1)
        # Every position is embedded both ways and torch.where picks: no gather of token subsets.
        specials = self.special_tokens(input_ids.clamp(max=self.n_special - 1))
        return torch.where(special, specials, hashed)

    def embedding_parameter_count(self) -> int:
        """Appendix 2.8's #Emb: everything but the special-token rows."""
        return sum(p.numel() for name, p in self.named_parameters()
                   if not name.startswith("special_tokens."))
