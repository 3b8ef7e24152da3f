"""Embeddings without a table per token, beside the HashFormers: ProFormer, BERT-Hash and EELBERT.

Variants of :data:`leanlm.modeling.variants.EMBEDDINGS` (the first and last on the hash embeddings' skeleton,
:class:`leanlm.modeling.embedding_base.HashEmbedding`); ``embedding_options`` [defaults]:

- ``proformer`` (Sankar et al. 2021, the ch. 2 baseline): ``bits`` [420] LSH projection bits, mapped
  to {-1, +1} and projected to d by a linear layer (Appendix 2.8 counts 420 x d). The ProFormer
  *model* is this embedding in a 2-layer encoder trained only on the task (no pretraining).
  Feature ``hash_bits`` from an LSH codebook with 420 bits.
- ``bert_hash`` (NeuML BERT-Hash, model_card_bert_hash_nano.txt): ``projections`` [5]: a
  vocab x projections table then a projections x d matrix (no bias): 30,522 x 5 + 5 x 768 =
  156,450. Token ids are ordinary vocabulary ids; no feature. :data:`BERT_HASH_SIZES` holds the
  femto / pico / nano configurations.
- ``eelbert`` (EELBERT-style dynamic embeddings, blog_dynamic_hash_embeddings.txt): no embedding
  matrix at all. Each character i-gram (i = 1..``ngram`` [3]) of a token has a polynomial rolling
  hash s (computed once per distinct token by the codebook: feature ``char_ngram_hashes``); with
  fixed random hash seeds h (one per hidden dimension, from ``seed`` [42]), p = (s * h) mod b
  (``modulus`` b [10^9+7]), mapped to [-1, 1) by p - b[p > b/2] then / (b/2), and averaged over the
  token's i-grams. The hidden dimensions are split into blocks proportional to i (i-grams get
  i / (1 + ... + n) of them, as the blog's partitions). ``max_chars`` [16]: longer tokens are cut.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_base import EmbeddingVariant, HashEmbedding, hash_bits_of
from leanlm.modeling.embedding_options import positive_int, read_options
# The registry is the files modeling/*_embeddings.py, each read lazily (leanlm.modeling.variants).
from leanlm.modeling.variants import EMBEDDINGS

# NeuML's three models: hidden size, layers, heads, FFN width, projections, and the card's totals
# (the card cuts them to three decimals: nano's 969,504 parameters print as 0.969M). pico is its
# published config.json and nano the card's training example, both exact; femto's config is not
# published: this is the configuration (pico's width, half its FFN, 3 projections) whose 243,726
# parameters fit both published roundings, the card's 0.243M and "244K" in NeuML's model lists.
BERT_HASH_SIZES: dict[str, dict[str, Any]] = {
    "femto": dict(d_model=80, n_layers=2, n_heads=2, d_ff=160, projections=3, card_params="0.243M"),
    "pico": dict(d_model=80, n_layers=2, n_heads=2, d_ff=320, projections=8, card_params="0.448M"),
    "nano": dict(d_model=128, n_layers=2, n_heads=2, d_ff=512, projections=16, card_params="0.969M"),
}


def bert_hash_config(size: str, **overrides: Any) -> ModelConfig:
    """ModelConfig of NeuML's ``bert-hash-<size>`` (BERT vocabulary, 512 positions, 2 token types)."""
    if size not in BERT_HASH_SIZES:
        raise ConfigError(f"unknown BERT-Hash size {size!r}; known: {', '.join(BERT_HASH_SIZES)}")
    spec = dict(BERT_HASH_SIZES[size])
    spec.pop("card_params")
    projections = spec.pop("projections")
    fields = dict(vocab_size=30522, max_position=512, type_vocab_size=2,
                  head_dim=spec["d_model"] // spec["n_heads"], embedding="bert_hash",
                  embedding_options={"projections": projections}, **spec)
    return ModelConfig.from_dict({**fields, **overrides}, where=f"BERT-Hash {size}")


@EMBEDDINGS.register("proformer")
class ProFormerEmbedding(HashEmbedding):
    """ProFormer's LSH projection layer: T-bit LSH projections in {-1, +1}, then a linear map to d."""

    defaults = {"hash": "lsh", "special_tokens": 5, "bits": 420}
    learns_regular_token = False

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_bits = positive_int(self.options, "bits", config)
        self.projection = nn.Linear(self.n_bits, config.d_model)

    def embed_hashed(self, hash_bits: torch.Tensor) -> torch.Tensor:
        bits = hash_bits_of(hash_bits, self.n_bits, self.name)
        return self.projection(2.0 * bits.to(self.projection.weight.dtype) - 1.0)

    def embedding_parameter_count(self) -> int:
        return self.projection.weight.numel()  # Eq. 2.11: 420 x d (the bias is not a per-bit vector)


@EMBEDDINGS.register("bert_hash")
class BertHashEmbedding(EmbeddingVariant, nn.Module):
    """NeuML BERT-Hash: each vocabulary token has a ``projections``-dim vector ("like a hash"),
    re-encoded to the hidden size by one matrix without bias."""

    features: tuple[str, ...] = ()
    defaults = {"projections": 5}

    def __init__(self, config: ModelConfig):
        super().__init__()
        options = read_options(config, self.defaults)
        self.n_projections = positive_int(options, "projections", config)
        self.tokens = nn.Embedding(config.vocab_size, self.n_projections, padding_idx=config.pad_token_id)
        self.projection = nn.Linear(self.n_projections, config.d_model, bias=False)

    def forward(self, input_ids: torch.Tensor, **features: torch.Tensor) -> torch.Tensor:
        return self.projection(self.tokens(input_ids))

    def embedding_parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _block_bounds(d_model: int, n_max: int) -> list[int]:
    """Dimension boundaries: i-grams get a block of about i / (n(n+1)/2) of d (last takes the rest)."""
    total = n_max * (n_max + 1) // 2
    cumulative = np.cumsum(np.arange(1, n_max + 1))
    return [0] + [int(round(d_model * c / total)) for c in cumulative[:-1]] + [d_model]


@EMBEDDINGS.register("eelbert")
class EELBERTEmbedding(HashEmbedding):
    """EELBERT-style dynamic embedding: a deterministic function of the token's characters."""

    features = ("char_ngram_hashes",)
    defaults = {"special_tokens": 5, "ngram": 3, "max_chars": 16, "seed": 42, "modulus": 10**9 + 7}
    learns_regular_token = False
    chunk_elements = 1 << 22  # bound on the int64 intermediate of one chunk of distinct tokens

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.n_max = positive_int(self.options, "ngram", config)
        self.max_chars = positive_int(self.options, "max_chars", config)
        # Rolling hashes (< 10^9+7, the codebook's modulus) times seeds (< 2^31) fit in int64.
        self.modulus = positive_int(self.options, "modulus", config)
        if config.d_model < self.n_max:
            raise ConfigError(f"model config: d_model={config.d_model} is smaller than ngram={self.n_max}")
        seed = self.options["seed"]
        seeds = np.random.Generator(np.random.PCG64(int(seed))).integers(0, 2**31, config.d_model)
        # Not a parameter and not saved: the seed in embedding_options regenerates it.
        self.register_buffer("hash_seeds", torch.as_tensor(seeds, dtype=torch.int64), persistent=False)
        self.bounds = _block_bounds(config.d_model, self.n_max)

    @torch.no_grad()
    def embed_distinct(self, hashes: torch.Tensor) -> torch.Tensor:
        """[U, n, M] rolling hashes (-1 = none) -> [U, d] embeddings."""
        b = self.modulus
        blocks = []
        for size in range(self.n_max):  # one pass per n-gram length (3), vectorised over tokens
            lo, hi = self.bounds[size], self.bounds[size + 1]
            s = hashes[:, size, :]  # [U, M]
            valid = s >= 0
            p = (s.clamp_min(0).unsqueeze(-1) * self.hash_seeds[lo:hi]) % b  # [U, M, block]
            p = (p - (p > b // 2).long() * b).double() / (b / 2)
            p = p * valid.unsqueeze(-1)
            blocks.append(p.sum(1) / valid.sum(1, keepdim=True).clamp_min(1))
        return torch.cat(blocks, dim=-1).float()

    def embed_hashed(self, char_ngram_hashes: torch.Tensor) -> torch.Tensor:
        if tuple(char_ngram_hashes.shape[-2:]) != (self.n_max, self.max_chars):
            raise ConfigError(f"embedding 'eelbert' expects char_ngram_hashes [..., {self.n_max}, "
                              f"{self.max_chars}], got {tuple(char_ngram_hashes.shape)}; pass the model's "
                              f"embedding_options to HashCodebook.features")
        lead = char_ngram_hashes.shape[:-2]
        flat = char_ngram_hashes.reshape(-1, self.n_max, self.max_chars)
        # Each distinct token is embedded once; the batch gathers the rows back.
        distinct, inverse = torch.unique(flat, dim=0, return_inverse=True)
        rows = max(1, self.chunk_elements // (self.max_chars * max(1, self.bounds[-1] - self.bounds[-2])))
        out = torch.cat([self.embed_distinct(distinct[i:i + rows]) for i in range(0, len(distinct), rows)])
        return out[inverse].view(*lead, -1).to(self.special_tokens.weight.dtype)

    def embedding_parameter_count(self) -> int:
        return 0  # no learned parameter generates a token's embedding
