"""Ch. 2's HashFormers (§2.3.1): the word embeddings hash_emb, hash_pool, hash_add and hash_proj.

Variants of the EMBEDDINGS registry (``config.embedding``, leanlm.modeling.variants), built on the hash
embeddings' skeleton (:class:`leanlm.modeling.embedding_base.HashEmbedding`: special-token rows and the
shared regular-token vector, ``special_tokens`` [5]). This file is loaded only by the runs that build one of
them; the features they read and the codebook that makes them are :mod:`leanlm.modeling.hash_features`.
Their ``embedding_options`` (defaults in brackets):

- ``hash_emb`` (HashFormer-Emb, §2.3.1): a table of N rows indexed by the token's hash bucket.
  ``hash`` [md5] (md5 | lsh: which codebook makes the buckets), ``buckets`` [1K]: an integer or
  ``50K`` (= 50,260, the official code's modulus: with the 5 special rows RoBERTa's 50,265) or
  ``1K`` (= 1,037: with the regular-token vector 1,038 rows, Pool's size; DESIGN §8). The regular-token
  vector is the official Pool/Add/Proj's sixth special row; the official Emb, a plain word table, has none.
- ``hash_pool`` (Pool, Eq. 2.1): ``hash``, ``bits`` T [128], ``k`` [10]; a shared codebook of 2^k
  rows, ceil(T/k) codewords (the last one shorter: 8 bits for T=128, k=10), softmax over the
  codewords per hidden dimension. ``dropout`` [0.0]: dropout on each gathered codebook vector before
  the weighted sum, which the official HashFormers code applies (0.1) and the thesis does not describe.
- ``hash_add`` (Add, Eq. 2.2): ``hash``, ``bits`` [128], ``scale`` [sqrt] (sqrt: gamma = sqrt(T), as
  footnote 5; mean: gamma = T); T codebooks of 2 vectors. ``dropout`` [0.0]: dropout on the codebook
  vectors themselves (one mask per forward pass, DropConnect), as the official code's Add (0.1).
- ``hash_proj`` (Proj, Eq. 2.3): ``hash``, ``bits`` [128]; output j is the Pearson correlation of the
  bit vector with learnable vector w_j (d vectors of length T).

BERT's ``standard`` lookup is :mod:`leanlm.modeling.standard_embeddings`; ProFormer, BERT-Hash and EELBERT
are :mod:`leanlm.modeling.projection_embeddings`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_base import HashEmbedding, hash_bits_of
from leanlm.modeling.embedding_options import positive_int
from leanlm.modeling.hash_features import emb_buckets
# The registry is the files modeling/*_embeddings.py, each read lazily (leanlm.modeling.variants).
from leanlm.modeling.variants import EMBEDDINGS


def dropout_option(options: Mapping[str, Any], config: ModelConfig) -> float:
    """``embedding_options.dropout`` in [0, 1): 0 is the thesis; the official HashFormers code uses 0.1."""
    value = options["dropout"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"model config: embedding_options.dropout={value!r} (embedding {config.embedding!r}) "
                          f"must be a number in [0, 1): 0 as the thesis, 0.1 as the official HashFormers code")
    return float(value)


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
        bits = hash_bits_of(hash_bits, self.n_bits, self.name).float()
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
        bits = hash_bits_of(hash_bits, self.n_bits, self.name)
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
        bits = hash_bits_of(hash_bits, self.n_bits, self.name).to(self.axes.dtype)
        bits = bits - bits.mean(-1, keepdim=True)
        bits = bits / bits.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        axes = self.axes - self.axes.mean(-1, keepdim=True)
        axes = axes / axes.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return torch.matmul(bits, axes.t())

