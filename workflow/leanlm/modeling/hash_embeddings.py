"""The word-embedding registry: BERT's lookup table and ch. 2's hash embeddings (HashFormers).

``BertEmbeddings`` builds its word embedding with :func:`build_word_embedding` from
``config.embedding`` and reads the variant's settings from ``config.embedding_options``. Every
variant is ``Module(config)`` with ``forward(input_ids: LongTensor[B, L], **features) -> [B, L, d]``
and declares the batch features it needs in ``features``; the data path makes them with
``HashCodebook.features(ids, names, options)`` (leanlm.hashing.codebook; ``codebook_settings(config)``
says which hash, bits and buckets that codebook must have, ``HashCodebook.for_model`` builds it):

- ``hash_bits``: FloatTensor [B, L, T] in {0, 1}; ``hash_buckets``: LongTensor [B, L];
- ``char_ngram_hashes``: LongTensor [B, L, n, max_chars] (EELBERT, see projection_embeddings).

Variants and their ``embedding_options`` (defaults in brackets):

- ``standard``: nn.Embedding(vocab_size, d) lookup; no options. Parameter for parameter BERT's.
- ``hash_emb`` (HashFormer-Emb, §2.3.1): a table of N rows indexed by the token's hash bucket.
  ``hash`` [md5] (md5 | lsh: which codebook makes the buckets), ``buckets`` [1K]: an integer or
  ``50K`` (= 50,260, the official code's modulus: with the 5 special rows RoBERTa's 50,265) or
  ``1K`` (= 1,037: with the regular-token vector 1,038 rows, Pool's size; DESIGN §8).
- ``hash_pool`` (Pool, Eq. 2.1): ``hash``, ``bits`` T [128], ``k`` [10]; a shared codebook of 2^k
  rows, ceil(T/k) codewords (the last one shorter: 8 bits for T=128, k=10), softmax over the
  codewords per hidden dimension. ``dropout`` [0.0]: dropout on each gathered codebook vector before
  the weighted sum, which the official HashFormers code applies (0.1) and the thesis does not describe.
- ``hash_add`` (Add, Eq. 2.2): ``hash``, ``bits`` [128], ``scale`` [sqrt] (sqrt: gamma = sqrt(T), as
  footnote 5; mean: gamma = T); T codebooks of 2 vectors. ``dropout`` [0.0]: dropout on the codebook
  vectors themselves (one mask per forward pass, DropConnect), as the official code's Add (0.1).
- ``hash_proj`` (Proj, Eq. 2.3): ``hash``, ``bits`` [128]; output j is the Pearson correlation of the
  bit vector with learnable vector w_j (d vectors of length T).

Every hash variant takes ``special_tokens`` [5]: ids below it are the codebook's fixed special rows
([PAD], [UNK], [CLS], [SEP], [MASK]), embedded from a small table of their own that Appendix 2.8
does not count; every other id is a regular token, and the HashFormers add one learned shared
"regular token" vector to its hash embedding (DESIGN §8: the official code's sixth special row of Pool,
Add and Proj; with it the counts are exactly the thesis's 99.1K / 197.4K / 797.2K). The official Emb has
no such row (a plain 50,265-row word table); ours gives Emb the vector too, so Emb (1K) has Pool's 1,038
rows. A special token gets its own row and no hash part; the official Add also adds to every special
token the same offset (its bit-0 vectors summed), see docs/design-notes.md. ProFormer, BERT-Hash and EELBERT
live in :mod:`leanlm.modeling.projection_embeddings` (loaded by the registry when a config names one).

``embedding_parameter_count()`` on each variant is Appendix 2.8's #Emb: the parameters that retrieve
or generate token embeddings, special tokens and positions excluded.
"""

from __future__ import annotations

import abc
import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError, DataError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.vocab import padding_parameters, vocab_table
# The registry is the files modeling/*_embeddings.py (this one and projection_embeddings), read lazily.
from leanlm.modeling.variants import EMBEDDINGS, Variant

# Named sizes of HashFormer-Emb (Table 2.2's "Emb (50K)" and "Emb (1K)").
EMB_BUCKETS = {"50K": 50_260, "1K": 1_037}
HASHES = ("md5", "lsh")


def build_word_embedding(config: ModelConfig) -> nn.Module:
    """The word embedding ``config.embedding`` names (ConfigError listing the known ones if unknown)."""
    return EMBEDDINGS.get(config.embedding)(config)


def embedding_features(config: ModelConfig) -> tuple[str, ...]:
    """Batch features the model's word embedding reads (empty for the standard lookup)."""
    return tuple(EMBEDDINGS.get(config.embedding).features)


def codebook_settings(config: ModelConfig) -> dict[str, Any] | None:
    """What the data path's HashCodebook must make for this model: ``hash`` (md5 | lsh), ``n_bits``
    (T) and ``n_buckets`` (N, or None when no bucket is read); None when the embedding reads no
    feature (standard, bert_hash)."""
    cls = EMBEDDINGS.get(config.embedding)
    if not cls.features:
        return None
    options = read_options(config, cls.defaults)
    buckets = emb_buckets(options["buckets"], config) if "hash_buckets" in cls.features else None
    return {"hash": options.get("hash", "md5"), "n_bits": options.get("bits", 128), "n_buckets": buckets}


def emb_buckets(value: int | str, config: ModelConfig) -> int:
    """HashFormer-Emb's N from ``embedding_options.buckets``: an integer, "50K" or "1K"."""
    if isinstance(value, str):
        if value not in EMB_BUCKETS:
            raise ConfigError(f"model config: embedding_options.buckets={value!r} must be an "
                              f"integer or one of {sorted(EMB_BUCKETS)}")
        return EMB_BUCKETS[value]
    return positive_int({"buckets": value}, "buckets", config)


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


def batch_feature(features: Mapping[str, torch.Tensor], name: str, embedding: str) -> torch.Tensor:
    try:
        return features[name]
    except KeyError:
        raise DataError(
            f"embedding {embedding!r} needs the batch feature {name!r} (made by "
            f"leanlm.hashing.HashCodebook.features); the batch has {sorted(features) or 'no features'}"
        ) from None


class EmbeddingVariant(Variant):
    """The registry contract of a word embedding: its settings are ``config.embedding_options`` over
    ``defaults``; a key it does not have is an error when the config is validated, before any job."""

    defaults: dict[str, Any] = {}

    @classmethod
    def check_config(cls, config: ModelConfig, where: str = "model config") -> None:
        read_options(config, cls.defaults)


@EMBEDDINGS.register("standard")
class StandardEmbedding(EmbeddingVariant, nn.Embedding):
    """BERT's word embedding: one row per vocabulary entry, padded to ``config.vocab_rows`` for the
    tensor cores (an nn.Embedding, so checkpoints and weight tying see the table they always saw; the
    Hugging Face export writes the real rows only)."""

    features: tuple[str, ...] = ()

    def __init__(self, config: ModelConfig):
        read_options(config, self.defaults)
        # config.vocab_rows: padded for the tensor cores, as the MLM head tied to it (leanlm.modeling.vocab)
        super().__init__(config.vocab_rows, config.d_model, padding_idx=config.pad_token_id)
        vocab_table(self, config.vocab_size)

    def forward(self, input_ids: torch.Tensor, **features: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids)

    def embedding_parameter_count(self) -> int:
        return self.weight.numel() - padding_parameters(self)  # Eq. 2.9: |V| x d, padded rows left out


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


def dropout_option(options: Mapping[str, Any], config: ModelConfig) -> float:
    """``embedding_options.dropout`` in [0, 1): 0 is the thesis; the official HashFormers code uses 0.1."""
    value = options["dropout"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"model config: embedding_options.dropout={value!r} (embedding {config.embedding!r}) "
                          f"must be a number in [0, 1): 0 as the thesis, 0.1 as the official HashFormers code")
    return float(value)


def _bits(features: torch.Tensor, n_bits: int, name: str) -> torch.Tensor:
    if features.size(-1) != n_bits:
        raise DataError(f"embedding {name!r} was built for {n_bits}-bit hashes but hash_bits has "
                        f"{features.size(-1)} bits; build the codebook with bits={n_bits}")
    return features if features.is_floating_point() else features.float()


@EMBEDDINGS.register("hash_emb")
class HashEmbEmbedding(HashEmbedding):
    """HashFormer-Emb (§2.3.1): the token's bucket (MD5 digest mod N, or LSH argmax) indexes a table."""

    features = ("hash_buckets",)
    defaults = {**HashEmbedding.defaults, "buckets": "1K"}

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_buckets = emb_buckets(self.options["buckets"], config)
        self.buckets = nn.Embedding(self.n_buckets, config.d_model)

    def embed_hashed(self, hash_buckets: torch.Tensor) -> torch.Tensor:
        return self.buckets(hash_buckets)


def codeword_powers(n_bits: int, k: int) -> torch.Tensor:
    """``[T, ceil(T/k)]`` matrix M with bits @ M = the codewords: bit i of codeword j (most
    significant first) weighs 2^(len_j - 1 - i). The last codeword keeps its own length (8 bits for
    T=128, k=10) rather than being padded, so its values lie in [0, 2^len)."""
    n_codes = math.ceil(n_bits / k)
    powers = torch.zeros(n_bits, n_codes, dtype=torch.float64)
    for j in range(n_codes):  # a loop over codewords at build time, not in the forward pass
        start, stop = j * k, min((j + 1) * k, n_bits)
        powers[start:stop, j] = 2.0 ** torch.arange(stop - start - 1, -1, -1, dtype=torch.float64)
    return powers


@EMBEDDINGS.register("hash_pool")
class HashPoolEmbedding(HashEmbedding):
    """Pool (Eq. 2.1): e = sum_j B[c_j] * softmax(W, over codewords)_j, elementwise per hidden dim.

    Computed as one EmbeddingBag over a per-codeword scaled table (B * softmax(W)_j for each j), so the
    13 gathered vectors per token are never stored for backward (the Appendix 2.9 remark).
    """

    defaults = {**HashEmbedding.defaults, "bits": 128, "k": 10, "dropout": 0.0}

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_bits = positive_int(self.options, "bits", config)
        self.dropout = dropout_option(self.options, config)
        self.k = positive_int(self.options, "k", config)
        if self.k > 24:
            raise ConfigError(f"model config: embedding_options.k={self.k} gives a codebook of 2^k rows; "
                              f"use k <= 24 (the thesis uses 10)")
        powers = codeword_powers(self.n_bits, self.k)
        self.n_codes = powers.size(1)
        # Integers, so that model.to(dtype) leaves them alone (fp16 cannot hold 2^16 and above).
        self.register_buffer("powers", powers.long(), persistent=False)
        self.register_buffer("offsets", torch.arange(self.n_codes) * 2**self.k, persistent=False)
        self.codebook = nn.Embedding(2**self.k, config.d_model)
        self.codeword_weights = nn.Parameter(torch.empty(self.n_codes, config.d_model))
        nn.init.normal_(self.codeword_weights, 0.0, config.initializer_range)

    def codewords(self, hash_bits: torch.Tensor) -> torch.Tensor:
        """LongTensor [..., ceil(T/k)] of the bits read k at a time (exact: values < 2^24)."""
        bits = _bits(hash_bits, self.n_bits, self.name).float()
        # In float32, exact below 2^24: autocast would run the product in bf16/fp16, which cannot hold
        # 10-bit integers exactly (and integer matmul has no CUDA kernel).
        with torch.autocast(device_type=bits.device.type, enabled=False):
            return torch.matmul(bits, self.powers.float()).round_().long()

    def embed_hashed(self, hash_bits: torch.Tensor) -> torch.Tensor:
        codes = self.codewords(hash_bits)
        weights = self.codeword_weights.softmax(dim=0)  # [C, d]: softmax over codewords per dim
        if self.dropout and self.training:  # the official code's dropout on the gathered vectors
            gathered = F.dropout(self.codebook(codes), self.dropout, training=True)  # [..., C, d]
            return (gathered * weights).sum(dim=-2)
        table = (self.codebook.weight[None] * weights[:, None]).flatten(0, 1)  # [C * 2^k, d]
        flat = (codes + self.offsets).flatten(0, -2)  # [N, C] rows of the scaled table
        out = F.embedding_bag(flat, table, mode="sum")
        return out.view(*codes.shape[:-1], -1)


@EMBEDDINGS.register("hash_add")
class HashAddEmbedding(HashEmbedding):
    """Add (Eq. 2.2): e = sum_j B^j[tau_j] / gamma with T codebooks of two vectors.

    sum_j B^j[tau_j] = sum_j B^j[0] + tau @ (B[:, 1] - B[:, 0]): one [T] x [T, d] product per token
    instead of T gathers.
    """

    defaults = {**HashEmbedding.defaults, "bits": 128, "scale": "sqrt", "dropout": 0.0}

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_bits = positive_int(self.options, "bits", config)
        self.dropout = dropout_option(self.options, config)
        if self.options["scale"] not in ("sqrt", "mean"):
            raise ConfigError(f"model config: embedding_options.scale={self.options['scale']!r} must be "
                              f"'sqrt' (gamma = sqrt(T), the thesis) or 'mean' (gamma = T)")
        self.gamma = math.sqrt(self.n_bits) if self.options["scale"] == "sqrt" else float(self.n_bits)
        self.codebooks = nn.Parameter(torch.empty(self.n_bits, 2, config.d_model))
        nn.init.normal_(self.codebooks, 0.0, config.initializer_range)

    def embed_hashed(self, hash_bits: torch.Tensor) -> torch.Tensor:
        bits = _bits(hash_bits, self.n_bits, self.name)
        codebooks = F.dropout(self.codebooks, self.dropout, training=self.training) if self.dropout else self.codebooks
        zero, one = codebooks[:, 0], codebooks[:, 1]
        return (zero.sum(0) + torch.matmul(bits.to(one.dtype), one - zero)) / self.gamma


@EMBEDDINGS.register("hash_proj")
class HashProjEmbedding(HashEmbedding):
    """Proj (Eq. 2.3): e_j = Pearson(tau, w_j) = <tau - mean, w_j - mean> / (|tau - mean| |w_j - mean|).

    A bit vector of all zeros or all ones has no variance; its correlations are defined as 0.
    """

    defaults = {**HashEmbedding.defaults, "bits": 128}
    eps = 1e-8

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_bits = positive_int(self.options, "bits", config)
        if self.n_bits < 2:
            raise ConfigError("model config: hash_proj needs bits >= 2 (a correlation needs variance)")
        self.axes = nn.Parameter(torch.empty(config.d_model, self.n_bits))  # w_1 .. w_d
        nn.init.normal_(self.axes, 0.0, config.initializer_range)

    def embed_hashed(self, hash_bits: torch.Tensor) -> torch.Tensor:
        bits = _bits(hash_bits, self.n_bits, self.name).to(self.axes.dtype)
        bits = bits - bits.mean(-1, keepdim=True)
        bits = bits / bits.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        axes = self.axes - self.axes.mean(-1, keepdim=True)
        axes = axes / axes.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return torch.matmul(bits, axes.t())

