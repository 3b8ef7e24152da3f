"""``corruption: official_code`` for the bit models (issue 27, the sources' own behaviour).

The official HashFormers code replaces a token of its bit models not by a random word but by random
inputs: Add and Proj (``DataCollatorForShuffleRandomThreeWayClassification_Proj.random_bitarrays``) a bit
vector whose density is drawn ~U(0, 1) per token, Pool (``..._Conj.random_indarrays``) uniformly random
codewords. These tests hold the replacements to those distributions, with tolerances that a random word's
code (density near 0.5, a codeword of the vocabulary) fails, and check the thesis corruption unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leanlm.hashing import HashCodebook, MD5Hasher
from leanlm.hashing.inputs import CodebookTokenizer, FeatureBatches, with_features
from leanlm.hashing.official_replacements import (OFFICIAL_RANDOM_INPUTS, official_random_inputs,
                                                  random_bit_vectors, random_codewords)
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hash_embeddings import codeword_powers
from leanlm.objectives.shuffle_random import ShuffleRandomBatches
from leanlm.stages.packed_batches import MLMBatches
from leanlm.training.shuffle_random import IGNORE_INDEX, RANDOM

T = 128
WORDS = " ".join(f"w{i}" for i in range(3000))


def ks_to_uniform(values: torch.Tensor) -> float:
    """Kolmogorov-Smirnov distance of the sample ``values`` in [0, 1] to U(0, 1)."""
    x = values.double().sort().values
    n = len(x)
    above = torch.arange(1, n + 1, dtype=torch.float64) / n - x
    below = x - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(above, below).max())


# A bit density is k / T: U(0, 1) seen through T = 128 bits is off by at most 1 / (T + 1) ~ 0.008, and
# n = 20,000 draws add ~0.01 (KS at the 0.1% level: 1.95 / sqrt(n) = 0.014). A random word's code
# (density ~ N(0.5, 0.044)) is ~0.35 away.
KS_TOLERANCE = 0.03


def codebook(words: str = WORDS) -> HashCodebook:
    book = HashCodebook(MD5Hasher())
    book.encode([words])
    return book


def test_official_bit_vectors_have_uniform_density_and_a_random_words_code_does_not():
    bits = random_bit_vectors(20_000, T, torch.Generator().manual_seed(0))
    assert bits.shape == (20_000, T) and set(bits.unique().tolist()) <= {0.0, 1.0}
    density = bits.mean(-1)
    assert ks_to_uniform(density) < KS_TOLERANCE
    # The figure: about 70% of official replacements lie outside [0.35, 0.65] (90 of 129 counts).
    outside = ((density < 0.35) | (density > 0.65)).float().mean()
    assert abs(float(outside) - 90 / 129) < 0.02
    # The wrong implementation, a random vocabulary word's MD5 code, fails the same check.
    book = codebook()
    words = book.random_ids((20_000,), torch.Generator().manual_seed(1))
    assert ks_to_uniform(book.bits(words).mean(-1)) > 10 * KS_TOLERANCE


def chi_square_uniform(values: torch.Tensor, n_values: int) -> tuple[float, float]:
    """Pearson's statistic of ``values`` against uniform over [0, n_values), and a bound that a uniform
    sample exceeds with probability < 1e-6 (mean + 5 sd of chi-square with n_values - 1 degrees)."""
    counts = torch.bincount(values, minlength=n_values).double()
    expected = len(values) / n_values
    dof = n_values - 1
    return float(((counts - expected) ** 2 / expected).sum()), dof + 5 * (2 * dof) ** 0.5


def test_official_pool_replacements_are_uniform_codewords_not_vocabulary_codes():
    bits = random_codewords(8192, T, torch.Generator().manual_seed(0))
    codes = torch.matmul(bits.double(), codeword_powers(T, 10)).round().long()  # Pool's 12 x 10 + 8 bits
    statistic, bound = chi_square_uniform(codes[:, :-1].flatten(), 2**10)
    assert statistic < bound
    statistic, bound = chi_square_uniform(codes[:, -1], 2**8)
    assert statistic < bound
    # Density-drawn vectors (the Add/Proj collator's) are not uniform codewords.
    wrong = torch.matmul(random_bit_vectors(8192, T, torch.Generator().manual_seed(0)).double(),
                         codeword_powers(T, 10)).round().long()
    statistic, bound = chi_square_uniform(wrong[:, :-1].flatten(), 2**10)
    assert statistic > 10 * bound
    # A random codeword is (almost surely) no word's code: the official draw is not a random word.
    book = codebook()
    vocabulary = {tuple(row) for row in book.bits(torch.arange(book.n_special, len(book))).long().tolist()}
    assert not any(tuple(row) in vocabulary for row in bits.long().tolist())


def test_draws_come_from_the_generator_only():
    for draw in (random_bit_vectors, random_codewords):
        a = draw(64, T, torch.Generator().manual_seed(3))
        torch.manual_seed(9)
        assert torch.equal(a, draw(64, T, torch.Generator().manual_seed(3)))
        assert not torch.equal(a, draw(64, T, torch.Generator().manual_seed(4)))


def model_config(embedding: str) -> ModelConfig:
    return ModelConfig(vocab_size=1, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=64,
                       embedding=embedding)


def sr_batches(book: HashCodebook, corruption: str, rows: int = 64, length: int = 64):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(book.n_special, len(book), (rows, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    return ids, ShuffleRandomBatches(ids, list(range(book.n_special)), len(book), 16, 1, 0.1, 0.1, seed=0,
                                     corruption=corruption)


# The official collator of each bit model: _Proj's bit vectors of uniform density (Add = RobertaProjEmbeddingsDE,
# Proj = RobertaProjEmbeddingsPCC), _Conj's uniform codewords (Pool = RobertaConjEmbeddings).
@pytest.mark.parametrize("embedding, collator", [("hash_add", "bits"), ("hash_proj", "bits"), ("hash_pool", "codewords")])
def test_official_code_gives_a_bit_model_random_inputs_at_replaced_tokens(embedding, collator):
    book = codebook()
    ids, inner = sr_batches(book, "official_code")
    batches = with_features(inner, model_config(embedding), CodebookTokenizer(book))
    assert isinstance(batches, FeatureBatches) and batches.random_inputs is not None
    batch = batches.masked(ids, torch.Generator().manual_seed(7))
    plain = inner.masked(ids, torch.Generator().manual_seed(7))  # the same draws, ids only
    replaced = batch["labels"] == RANDOM
    assert torch.equal(batch["labels"], plain["labels"]) and replaced.sum() > 300
    # The token stays itself (a regular token), as in the collators, whose ids only tell special from regular.
    assert torch.equal(batch["input_ids"][replaced], ids[replaced])
    assert torch.equal(batch["input_ids"][~replaced], plain["input_ids"][~replaced])
    # Everywhere else the bits are the (corrupted) tokens' own codes.
    assert torch.equal(batch["hash_bits"][~replaced], book.bits(plain["input_ids"])[~replaced])
    density = batch["hash_bits"][replaced].mean(-1)
    if collator == "bits":
        assert ks_to_uniform(density) < 2.5 * KS_TOLERANCE  # ~400 draws: KS noise ~0.07 at the 0.1% level
    else:  # fair coins: density sd 0.044, so a density-drawn vector (outside 0.3-0.7 at 60%) fails
        assert (density - 0.5).abs().max() < 0.2
    # The same step's batch twice is the same batch (a resumed run replays it).
    assert all(torch.equal(batches(3, 0)[k], batches(3, 0)[k]) for k in batch)
    assert set(batches(3, 0)) == set(batch)


def test_official_code_leaves_models_the_official_code_lacks_to_random_words():
    assert official_random_inputs(model_config("proformer")) is None
    assert set(OFFICIAL_RANDOM_INPUTS) == {"hash_add", "hash_proj", "hash_pool"}


# The official Emb reads ids of a 50,265-row word table (ids 0-4 RoBERTa's special tokens, a regular token
# its bucket + 5), and its collator, the plain one, replaces a token by an id drawn uniformly from that whole
# table: in our terms a uniform draw over the N + 5 (special ids, buckets), whatever the corpus's words.
# A random codebook row's bucket is not that: it is a corpus word's bucket (few distinct ones where the
# corpus is small, LSH's clusters where it is not) and a special id only 5 / rows of the time.
EMB_WORDS = " ".join(f"w{i}" for i in range(40))


def official_ids(batch: dict, n_special: int = 5) -> torch.Tensor:
    """Each token as the official Emb reads it: its special id, or its bucket + 5."""
    return torch.where(batch["input_ids"] < n_special, batch["input_ids"], batch["hash_buckets"] + n_special)


def test_official_code_gives_emb_uniform_ids_of_the_whole_vocabulary():
    n_ids = 1_037 + 5  # Emb (1K): the buckets and the 5 special ids
    book = HashCodebook(MD5Hasher(), n_buckets=1_037)
    book.encode([EMB_WORDS])
    config = ModelConfig(vocab_size=1, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=64,
                         embedding="hash_emb", embedding_options={"hash": "md5", "buckets": "1K"})
    ids, inner = sr_batches(book, "official_code", rows=256)
    batches = with_features(inner, config, CodebookTokenizer(book))
    assert isinstance(batches, FeatureBatches) and batches.random_inputs is not None
    batch = batches.masked(ids, torch.Generator().manual_seed(7))
    plain = inner.masked(ids, torch.Generator().manual_seed(7))  # the same draws, ids only
    replaced = batch["labels"] == RANDOM
    assert torch.equal(batch["labels"], plain["labels"]) and replaced.sum() > 1000
    drawn = official_ids(batch)[replaced]
    assert ks_to_uniform((drawn.double() + 0.5) / n_ids) < 0.06  # ~1,400 draws: KS noise 0.05 at the 0.1% level
    assert abs(float((drawn < 5).double().mean()) - 5 / n_ids) < 0.01
    # A replaced token drawn regular stays itself (a regular token) and reads the drawn bucket.
    regular = replaced & (batch["input_ids"] >= 5)
    assert torch.equal(batch["input_ids"][regular], ids[regular])
    # Everywhere else the ids and buckets are the (corrupted) tokens' own.
    assert torch.equal(batch["input_ids"][~replaced], plain["input_ids"][~replaced])
    assert torch.equal(batch["hash_buckets"][~replaced], book.buckets(plain["input_ids"])[~replaced])
    # The wrong draw, a random codebook row's bucket (what the ids-only batch holds), fails the same check.
    wrong = torch.where(plain["input_ids"] < 5, plain["input_ids"], book.buckets(plain["input_ids"]) + 5)[replaced]
    assert ks_to_uniform((wrong.double() + 0.5) / n_ids) > 0.1
    # The same step's batch twice is the same batch (a resumed run replays it).
    assert all(torch.equal(batches(3, 0)[k], batches(3, 0)[k]) for k in batch)


@pytest.mark.parametrize("embedding", ["hash_add", "hash_pool"])
def test_thesis_corruption_and_mlm_batches_are_unchanged(embedding):
    book = codebook()
    ids, inner = sr_batches(book, "thesis")
    batches = with_features(inner, model_config(embedding), CodebookTokenizer(book))
    assert batches.random_inputs is None
    for step, micro in ((0, 0), (5, 0)):
        got, want = batches(step, micro), inner(step, micro)
        want.update(book.features(want["input_ids"], ["hash_bits"]))
        assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    mlm = MLMBatches(ids, list(range(book.n_special)), 4, len(book), 16, 1, 0.15, seed=0)
    assert with_features(mlm, model_config(embedding), CodebookTokenizer(book)).random_inputs is None
    assert (inner.masked(ids, torch.Generator().manual_seed(1))["labels"] != IGNORE_INDEX).any()


def test_emb_replacements_draw_special_ids_and_buckets_uniformly():
    """Drawn directly, many times: a replaced token is one of the 5 special ids with probability 5 / (5 + N),
    each special id and each bucket equally often (a draw that never picked a special id, which a KS test over
    a large vocabulary cannot see, fails here), and a bucket draw keeps the token itself in input_ids."""
    from scipy import stats as sps

    from leanlm.hashing.official_replacements import OfficialRandomBuckets
    from leanlm.training.shuffle_random import RANDOM

    n_special, n_buckets, n = 5, 45, 40_000
    rows = torch.full((1, n), 7)
    batch = {"input_ids": rows.clone(), "hash_buckets": torch.zeros(1, n, dtype=torch.long),
             "labels": torch.full((1, n), RANDOM)}
    OfficialRandomBuckets(n_special, n_buckets)(rows, batch, torch.Generator().manual_seed(0))
    ids, buckets = batch["input_ids"][0], batch["hash_buckets"][0]
    special = ids < n_special
    share = float(special.float().mean())
    assert abs(share - n_special / (n_special + n_buckets)) < 5 * np.sqrt(0.1 * 0.9 / n), share
    assert sps.chisquare(np.bincount(ids[special].numpy(), minlength=n_special)).pvalue > 1e-3
    assert sps.chisquare(np.bincount(buckets[~special].numpy(), minlength=n_buckets)).pvalue > 1e-3
    assert bool((ids[~special] == 7).all()) and bool((buckets[special] == 0).all())
