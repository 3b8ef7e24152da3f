"""What ch. 2's hash embeddings promise beyond their equations (test_hash_embeddings.py has those): every
bad option is refused naming the option, its value and the embedding; the learned vectors start as
N(0, initializer_range) in a built model; [PAD] stays zero; checkpoints hold only learned weights;
codewords stay exact under autocast; any dtype and any leading shape work. Found missing by mutation
testing (docs/mutation-testing.md)."""

from __future__ import annotations

import re

import pytest
import torch

from leanlm.errors import ConfigError, DataError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embeddings import build_word_embedding
from leanlm.modeling.hash_features import codebook_settings
from leanlm.modeling.variants import EMBEDDINGS
from leanlm.modeling.models import build_model

from test_hash_embeddings import random_bits, tiny, trained_like  # noqa: E402  (tests/ is on sys.path)
from test_mutation_gaps import _assert_normal  # noqa: E402

HASHED = ["hash_pool", "hash_add", "hash_proj"]  # the variants that read hash_bits


def _refused(embedding: str, message: str, **options) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build_word_embedding(tiny(embedding, **options))


# ----------------------------------------------------------------------------- options
@pytest.mark.parametrize("embedding,key", [("hash_add", "bits"), ("hash_pool", "bits"), ("hash_pool", "k"),
                                           ("hash_proj", "bits"), ("hash_proj", "special_tokens"),
                                           ("hash_emb", "buckets")])
@pytest.mark.parametrize("value", [0, -3, 2.0, True])
def test_integer_options_must_be_positive_integers(embedding, key, value):
    _refused(embedding, f"model config: embedding_options.{key}={value!r} of embedding {embedding!r} "
                        f"must be a positive integer", **{key: value})


def test_the_smallest_valid_integer_options_are_accepted():
    assert build_word_embedding(tiny("hash_add", bits=1)).n_bits == 1
    assert build_word_embedding(tiny("hash_pool", bits=3, k=1)).n_codes == 3
    assert build_word_embedding(tiny("hash_emb", buckets=1)).n_buckets == 1
    assert build_word_embedding(tiny("hash_proj", special_tokens=1)).n_special == 1  # [PAD] only


def test_codebook_settings_name_a_bad_bucket_count():
    with pytest.raises(ConfigError, match=re.escape("embedding_options.buckets=0 of embedding 'hash_emb'")):
        codebook_settings(tiny("hash_emb", buckets=0))
    assert codebook_settings(tiny("hash_emb", buckets=7)) == {"hash": "md5", "n_bits": 128, "n_buckets": 7}


def test_codebook_settings_of_every_embedding():
    """What the data path's codebook is built with (and cached under) for each embedding: EELBERT reads
    character n-gram hashes and sets no hash of its own, so it gets the md5 / 128-bit default."""
    got = {name: codebook_settings(tiny(name)) for name in EMBEDDINGS.names()}
    md5 = {"hash": "md5", "n_bits": 128, "n_buckets": None}
    assert got == {"standard": None, "bert_hash": None, "eelbert": md5, "hash_add": md5, "hash_pool": md5,
                   "hash_proj": md5, "hash_emb": {**md5, "n_buckets": 1_037},
                   "proformer": {"hash": "lsh", "n_bits": 420, "n_buckets": None}}


def test_an_unknown_option_lists_the_embeddings_settings_and_defaults():
    _refused("hash_proj", "model config: embedding_options ['k'] are not settings of embedding 'hash_proj'; its "
                          "settings: hash (default 'md5'), special_tokens (default 5), bits (default 128)", k=3)
    _refused("standard", "model config: embedding_options ['bits'] are not settings of embedding 'standard'; its "
                         "settings: none", bits=8)


@pytest.mark.parametrize("embedding", ["hash_pool", "hash_add"])
def test_a_bad_dropout_rate_is_named(embedding):
    _refused(embedding, f"model config: embedding_options.dropout=1.0 (embedding {embedding!r}) must be a number in "
                        f"[0, 1): 0 as the thesis, 0.1 as the official HashFormers code", dropout=1.0)


def test_pool_codebook_size_is_bounded():
    _refused("hash_pool", "model config: embedding_options.k=25 gives a codebook of 2^k rows; use k <= 24 "
                          "(the thesis uses 10)", k=25)
    with torch.device("meta"):  # 2^24 rows: built without memory
        assert build_word_embedding(tiny("hash_pool", k=24)).codebook.num_embeddings == 2**24


def test_add_scale_and_proj_bits_are_checked():
    _refused("hash_add", "model config: embedding_options.scale='max' must be 'sqrt' (gamma = sqrt(T), the thesis) "
                         "or 'mean' (gamma = T)", scale="max")
    _refused("hash_proj", "model config: hash_proj needs bits >= 2 (a correlation needs variance)", bits=1)
    assert build_word_embedding(tiny("hash_proj", bits=2)).n_bits == 2


def test_pad_token_must_be_a_special_row():
    config = ModelConfig(**{**tiny("hash_proj", special_tokens=3).__dict__, "pad_token_id": 3})
    with pytest.raises(ConfigError, match=re.escape("model config: pad_token_id=3 must be one of the 3 special rows "
                                                    "of a hash embedding (the codebook's [PAD] is 0)")):
        build_word_embedding(config)


# ----------------------------------------------------------------------------- batch features
@pytest.mark.parametrize("embedding", HASHED)
def test_missing_or_mis_sized_hash_bits_are_named(embedding):
    emb = build_word_embedding(tiny(embedding, bits=8))
    ids = torch.tensor([[7, 9]])
    wanted = (f"embedding {embedding!r} needs the batch feature 'hash_bits' (made by "
              f"leanlm.hashing.HashCodebook.features); the batch has ")
    with pytest.raises(DataError, match=f"^{re.escape(wanted + 'no features')}$"):
        emb(ids)
    with pytest.raises(DataError, match=f"^{re.escape(wanted + str(['hash_buckets']))}$"):
        emb(ids, hash_buckets=torch.zeros(1, 2, dtype=torch.long))
    wrong_width = (f"embedding {embedding!r} was built for 8-bit hashes but hash_bits has 9 bits; "
                   f"build the codebook with bits=8")
    with pytest.raises(DataError, match=f"^{re.escape(wrong_width)}$"):
        emb(ids, hash_bits=random_bits(1, 2, 9))


# ----------------------------------------------------------------------------- initialisation
@pytest.mark.parametrize("embedding,field", [("hash_pool", "codeword_weights"), ("hash_add", "codebooks"),
                                             ("hash_proj", "axes"), ("hash_proj", "regular_token")])
def test_learned_vectors_start_at_the_initializer_range_in_a_model(embedding, field):
    """The model's init covers nn.Linear and nn.Embedding; these plain parameters keep the embedding's
    own N(0, initializer_range) draw."""
    torch.manual_seed(0)
    config = ModelConfig(**{**tiny(embedding).__dict__, "d_model": 64, "n_heads": 8, "initializer_range": 0.05})
    model = build_model(config, "mlm")
    found = [p for name, p in model.named_parameters() if name.endswith(f"word_embeddings.{field}")]
    assert len(found) == 1
    _assert_normal(found[0].detach().double(), 0.05)


@pytest.mark.parametrize("pad", [0, 3])
def test_the_pad_row_is_zero_and_gets_no_gradient(pad):
    config = ModelConfig(**{**tiny("hash_add", bits=8).__dict__, "pad_token_id": pad})
    emb = build_word_embedding(config)
    assert torch.count_nonzero(emb.special_tokens.weight[pad]) == 0
    emb(torch.tensor([[pad, 1, 2, 4]]), hash_bits=random_bits(1, 4, 8)).sum().backward()
    assert torch.count_nonzero(emb.special_tokens.weight.grad[pad]) == 0
    assert torch.count_nonzero(emb.special_tokens.weight.grad[4 if pad != 4 else 1]) > 0


# ----------------------------------------------------------------------------- computation
def test_pool_checkpoints_hold_only_learned_weights():
    """The codeword powers and table offsets are rebuilt from (bits, k): not in the state dict."""
    emb = build_word_embedding(tiny("hash_pool", bits=12, k=5))
    assert sorted(emb.state_dict()) == ["codebook.weight", "codeword_weights", "regular_token",
                                        "special_tokens.weight"]


def test_pool_codewords_stay_exact_under_autocast():
    """bf16 holds 8 significant bits, so bits @ powers must not autocast: 10-bit codewords stay exact."""
    emb = build_word_embedding(tiny("hash_pool"))
    bits = random_bits(4, 16, 128, seed=5)
    # Codeword j reads bits 10j .. 10j+9 (the last one 8 bits), most significant first: in integers.
    exact = torch.stack([(bits[..., j:j + 10].long() * 2 ** torch.arange(len(range(j, min(j + 10, 128))) - 1, -1, -1)
                          ).sum(-1) for j in range(0, 128, 10)], -1)
    assert int(exact.max()) > 2**8
    assert torch.equal(emb.codewords(bits), exact)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(emb.codewords(bits), exact)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_pool_codewords_stay_exact_after_a_cast(dtype):
    """model.to(dtype) casts floating buffers, and fp16 cannot hold 2^16 or more (k up to 24 is
    allowed): the codeword powers must survive any cast."""
    emb = build_word_embedding(tiny("hash_pool", bits=40, k=20))
    bits = random_bits(3, 7, 40, seed=6)
    exact = emb.codewords(bits)
    assert int(exact.max()) > 2**16
    assert torch.equal(emb.to(dtype).codewords(bits), exact)


@pytest.mark.parametrize("embedding", HASHED)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_hash_embeddings_run_in_the_models_dtype(embedding, dtype):
    """After model.to(dtype) (Pool's codeword powers, a buffer, are cast too) the vectors come out in
    that dtype and agree with float32 to its precision."""
    emb = trained_like(build_word_embedding(tiny(embedding, bits=10)))
    ids, bits = torch.tensor([[1, 7, 9]]), random_bits(1, 3, 10, seed=1)
    expected = emb(ids, hash_bits=bits)
    got = emb.to(dtype)(ids, hash_bits=bits)
    assert got.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float64 else 5e-2
    torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("embedding", HASHED)
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_embed_hashed_takes_any_leading_shape(embedding, dropout):
    """[L, T] (one sequence) and [B, L, T] give the same vectors, in training (dropout) as in evaluation."""
    options = {"bits": 10} | ({"dropout": dropout} if embedding != "hash_proj" else {})
    emb = trained_like(build_word_embedding(tiny(embedding, **options)))
    bits = random_bits(1, 5, 10, seed=4)
    torch.manual_seed(1)
    batched = emb.embed_hashed(bits)
    torch.manual_seed(1)
    single = emb.embed_hashed(bits[0])
    assert single.shape == (5, 16)
    torch.testing.assert_close(single, batched[0])
