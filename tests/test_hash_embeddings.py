"""Ch. 2 embeddings (leanlm.modeling.hash_embeddings, projection_embeddings): Table 2.2's exact counts,
Pool/Add/Proj and EELBERT against per-token computations, the standard embedding unchanged, BERT-Hash sizes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError, DataError
from leanlm.hashing import HashCodebook, MD5Hasher, word_tokenize
from leanlm.hashing.ngrams import rolling_hash
from leanlm.modeling.checkpoint import load_model, save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import total_parameters
from leanlm.modeling.embeddings import BertEmbeddings, build_word_embedding
from leanlm.modeling.encoder import BertEncoder
from leanlm.modeling.hash_embeddings import codeword_powers
from leanlm.modeling.hash_features import codebook_settings, embedding_features
from leanlm.modeling.heads import BertForMLM
from leanlm.modeling.models import build_model
from leanlm.modeling.projection_embeddings import BERT_HASH_SIZES, bert_hash_config
from leanlm.modeling.variants import EMBEDDINGS
from leanlm.reporting.ch2.counts import table_2_2_parameter_rows

TINY = dict(vocab_size=50, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=24)


def tiny(embedding: str, **options) -> ModelConfig:
    return ModelConfig(**TINY, embedding=embedding, embedding_options=options)


def trained_like(module: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return module


def random_bits(*shape, seed=0) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=torch.Generator().manual_seed(seed)).float()


# Table 2.2: (#Total, #Emb, PCR(All), PCR(Emb), PoEP) as printed.
TABLE_2_2 = {
    "CANINE-C": ("121.0M", "12.3M", 2.9, 68.1, 10.2),
    "ProFormer": ("15.1M", "322.6K", 87.9, 99.2, 2.1),
    "Emb (50K)": ("124.6M", "38.6M", 0.0, 0.0, 31.0),
    "Emb (1K)": ("86.8M", "797.2K", 30.3, 97.9, 1.0),
    "Pool": ("86.8M", "797.2K", 30.3, 97.9, 1.0),
    "Add": ("86.2M", "197.4K", 30.8, 99.5, 0.2),
    "Proj": ("86.1M", "99.1K", 30.9, 99.7, 0.1),
}


def test_table_2_2_parameter_counts_are_the_thesis_numbers():
    rows = table_2_2_parameter_rows()
    base = rows[rows["model"] == "BERT-MLM"].iloc[0]
    assert (base.total, base.emb) == (124_647_170, 50_265 * 768)  # RoBERTa-base, 124.6M / 38.6M
    for group in ("HashFormers-MD", "HashFormers-LSH", "Baselines"):
        for _, row in rows[rows["group"] == group].iterrows():
            total, emb, pcr_all, pcr_emb, poep = TABLE_2_2[row.model]
            assert (row.total_printed, row.emb_printed) == (total, emb), row.model
            assert (row.pcr_all, row.pcr_emb) == (pcr_all, pcr_emb), row.model
            # PoEP of Emb (1K) / Pool is printed 1.0 but 797.2K / 86.8M is 0.92%: not reproducible.
            assert row.poep == (0.9 if row.model in ("Emb (1K)", "Pool") else poep), row.model
    d = 768
    emb = dict(zip(rows["model"], rows["emb"]))
    # Appendix 2.8's formulas, plus the one shared regular-token vector (DESIGN §8).
    assert emb["Proj"] == 128 * d + d  # Eq. 2.15
    assert emb["Add"] == 2 * 128 * d + d  # Eq. 2.14
    assert emb["Pool"] == (math.ceil(128 / 10) + 2**10) * d + d  # Eq. 2.13
    assert emb["Emb (1K)"] == 1038 * d and emb["Emb (50K)"] == 50_261 * d  # Eq. 2.12, N + regular
    assert emb["ProFormer"] == 420 * d and emb["CANINE-C"] == 16_000 * d


def test_standard_embedding_is_berts_table_unchanged():
    config = ModelConfig(**TINY)
    torch.manual_seed(0)
    embeddings = BertEmbeddings(config)
    words = embeddings.word_embeddings
    assert isinstance(words, nn.Embedding) and words.padding_idx == config.pad_token_id
    assert [k for k, _ in embeddings.named_parameters()] == [
        "word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
        "norm.weight", "norm.bias"]
    assert total_parameters(words) == 50 * 16 and words.embedding_parameter_count() == 50 * 16
    # Same draws as the nn.Embedding BertEmbeddings built before the registry, in the first 50 rows; the
    # table has 64 (the vocabulary padded for the tensor cores, ModelConfig.pad_vocab_to), counted as 50.
    assert words.weight.shape == (64, 16)
    torch.manual_seed(0)
    assert torch.equal(words.weight[:50], nn.Embedding(50, 16, padding_idx=config.pad_token_id).weight)
    ids = torch.tensor([[1, 7, 0]])
    assert torch.equal(words(ids, hash_bits=torch.zeros(1, 3, 4)), F.embedding(ids, words.weight))
    mlm = BertForMLM(config)
    assert mlm.decoder.weight is mlm.encoder.embeddings.word_embeddings.weight
    assert embedding_features(config) == ()
    with pytest.raises(ConfigError, match="not settings"):
        build_word_embedding(tiny("standard", bits=128))


def test_pool_codewords_follow_the_thesis_example():
    # §2.3.4: k = 4, [1,0,1,0, 0,1,0,0, 0,0,0,1] -> codewords [1010, 0100, 0001] = [10, 4, 1].
    bits = torch.tensor([1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1], dtype=torch.float64)
    assert (bits @ codeword_powers(12, 4)).tolist() == [10, 4, 1]
    powers = codeword_powers(128, 10)  # 13 codewords, the last of 8 bits
    assert powers.shape == (128, 13) and powers[:, -1].sum() == 2**8 - 1


def test_pool_matches_a_per_token_computation():
    emb = trained_like(build_word_embedding(tiny("hash_pool", bits=12, k=5)))  # codewords of 5, 5, 2 bits
    bits = random_bits(2, 3, 12)
    out = emb.embed_hashed(bits)
    weights = torch.softmax(emb.codeword_weights, dim=0)
    for b in range(2):
        for t in range(3):
            word = "".join(str(int(x)) for x in bits[b, t])
            codes = [int(word[0:5], 2), int(word[5:10], 2), int(word[10:12], 2)]
            want = sum(emb.codebook.weight[c] * weights[j] for j, c in enumerate(codes))
            torch.testing.assert_close(out[b, t], want)


def test_add_matches_a_per_token_computation():
    emb = trained_like(build_word_embedding(tiny("hash_add", bits=10)))
    bits = random_bits(2, 3, 10, seed=1)
    out = emb.embed_hashed(bits)
    for b in range(2):
        for t in range(3):
            want = sum(emb.codebooks[j, int(bits[b, t, j])] for j in range(10)) / math.sqrt(10)
            torch.testing.assert_close(out[b, t], want)
    mean = build_word_embedding(tiny("hash_add", bits=10, scale="mean"))
    assert mean.gamma == 10


def test_pool_and_add_dropout_as_the_official_code():
    """embedding_options.dropout (0 = the thesis, the default): Pool drops each gathered codebook vector
    before the weighted sum, Add drops the codebook vectors themselves; evaluation is unchanged. The rate
    is 0.25, not F.dropout's default 0.5, so a rate that does not reach F.dropout shows."""
    bits = random_bits(2, 3, 12, seed=2)
    pool = trained_like(build_word_embedding(tiny("hash_pool", bits=12, k=5, dropout=0.25)))
    codes = pool.codewords(bits)
    weights = torch.softmax(pool.codeword_weights, dim=0)
    torch.manual_seed(7)
    trained = pool.embed_hashed(bits)
    torch.manual_seed(7)
    mask = F.dropout(torch.ones(2, 3, 3, 16), 0.25, training=True)  # the same draw: [B, L, codewords, d]
    want = (pool.codebook.weight[codes] * mask * weights).sum(-2)
    torch.testing.assert_close(trained, want)
    assert (mask == 0).any() and not torch.allclose(trained, (pool.codebook.weight[codes] * weights).sum(-2))
    pool.eval()
    torch.testing.assert_close(pool.embed_hashed(bits), (pool.codebook.weight[codes] * weights).sum(-2))

    add = trained_like(build_word_embedding(tiny("hash_add", bits=10, dropout=0.25)))
    bits = bits[..., :10]
    torch.manual_seed(3)
    trained = add.embed_hashed(bits)
    torch.manual_seed(3)
    dropped = F.dropout(add.codebooks, 0.25, training=True)  # one mask over the codebooks for the batch
    for b in range(2):
        for t in range(3):
            want = sum(dropped[j, int(bits[b, t, j])] for j in range(10)) / math.sqrt(10)
            torch.testing.assert_close(trained[b, t], want)
    add.eval()
    plain = sum(add.codebooks[j, bits[..., j].long()] for j in range(10)) / math.sqrt(10)
    torch.testing.assert_close(add.embed_hashed(bits), plain)
    # The thesis's default changes nothing, and a bad rate is named.
    assert build_word_embedding(tiny("hash_pool")).dropout == 0.0 == build_word_embedding(tiny("hash_add")).dropout
    for bad in (1.0, -0.1, "0.1", True):
        with pytest.raises(ConfigError, match=r"embedding_options.dropout=.* must be a number in \[0, 1\)"):
            build_word_embedding(tiny("hash_add", dropout=bad))


def test_proj_is_the_pearson_correlation_per_dimension():
    emb = trained_like(build_word_embedding(tiny("hash_proj", bits=32)))
    bits = random_bits(2, 3, 32, seed=2)
    bits[1, 2] = 1.0  # no variance: correlations defined as 0
    out = emb.embed_hashed(bits)
    axes = emb.axes.detach().double().numpy()
    for b in range(2):
        for t in range(3):
            if b == 1 and t == 2:
                assert torch.equal(out[b, t], torch.zeros(16))
                continue
            tau = bits[b, t].double().numpy()
            want = [np.corrcoef(tau, axes[j])[0, 1] for j in range(16)]
            np.testing.assert_allclose(out[b, t].detach().numpy(), want, rtol=1e-5, atol=1e-6)


def test_hash_embedding_specials_regular_token_and_errors():
    emb = trained_like(build_word_embedding(tiny("hash_proj", bits=8)))
    ids = torch.tensor([[2, 9, 0, 4, 17]])
    bits = random_bits(1, 5, 8, seed=3)
    out = emb(ids, hash_bits=bits)
    specials = emb.special_tokens.weight
    assert torch.equal(out[0, 0], specials[2]) and torch.equal(out[0, 3], specials[4])
    torch.testing.assert_close(out[0, 1], emb.embed_hashed(bits)[0, 1] + emb.regular_token)
    assert emb.embedding_parameter_count() == 8 * 16 + 16  # special rows not counted
    assert embedding_features(tiny("hash_emb")) == ("hash_buckets",)
    with pytest.raises(DataError, match="hash_bits"):
        emb(ids)
    with pytest.raises(DataError, match="8-bit"):
        emb(ids, hash_bits=random_bits(1, 5, 9))
    with pytest.raises(ConfigError, match="not settings"):
        build_word_embedding(tiny("hash_proj", buckets=3))
    with pytest.raises(ConfigError, match="hash"):
        build_word_embedding(tiny("hash_add", hash="sha1"))
    with pytest.raises(ConfigError, match="buckets"):
        build_word_embedding(tiny("hash_emb", buckets="2K"))
    with pytest.raises(ConfigError, match="known"):
        build_word_embedding(tiny("no_such_embedding"))
    assert build_word_embedding(tiny("hash_emb", buckets="50K")).n_buckets == 50_260


def test_bert_hash_sizes_match_the_model_card():
    card = {"femto": "0.243M", "pico": "0.448M", "nano": "0.969M"}
    for size, spec in BERT_HASH_SIZES.items():
        with torch.device("meta"):
            encoder = BertEncoder(bert_hash_config(size))  # BertModel: embeddings, layers, pooler
        count = total_parameters(encoder)
        # The card cuts to three decimals (nano: 969,504 -> 0.969M).
        assert f"{math.floor(count / 1e3) / 1e3:.3f}M" == card[size] == spec["card_params"]
    assert bert_hash_config("pico").d_model == 80
    # The card's example: 30,522 x 5 + 5 x 768 = 156,450 parameters.
    config = ModelConfig.preset("base", embedding="bert_hash")
    with torch.device("meta"):
        assert build_word_embedding(config).embedding_parameter_count() == 156_450


def eelbert_reference(token: str, d: int, seeds: np.ndarray, n: int = 3, b: int = 10**9 + 7) -> np.ndarray:
    """The blog's algorithm for one token, in plain Python."""
    bounds = [0, round(d * 1 / 6), round(d * 3 / 6), d]
    out = np.zeros(d)
    for size in range(1, n + 1):
        lo, hi = bounds[size - 1], bounds[size]
        grams = [token[i:i + size] for i in range(len(token) - size + 1)]
        if not grams:
            continue
        for g in grams:
            p = np.array([(rolling_hash(g) * int(h)) % b for h in seeds[lo:hi]], dtype=np.int64)
            p = p - (p > b / 2) * b
            out[lo:hi] += p / (b / 2)
        out[lo:hi] /= len(grams)
    return out


def test_eelbert_matches_the_blog_algorithm_and_has_no_token_parameters():
    config = tiny("eelbert", seed=7)
    emb = build_word_embedding(config)
    book = HashCodebook(MD5Hasher())
    words = ["play", "plays", "a", "zebra"]
    ids = torch.tensor([book.encode([" ".join(words)])[0] + [0]])
    features = book.features(ids, embedding_features(config), config.embedding_options)
    out = emb(ids, **features)
    seeds = emb.hash_seeds.numpy()
    for k, word in enumerate(words):
        np.testing.assert_allclose(out[0, k].detach().numpy(), eelbert_reference(word, 16, seeds),
                                   rtol=1e-5, atol=1e-6)
    assert torch.equal(out[0, 4], emb.special_tokens.weight[0])  # [PAD]
    assert emb.embedding_parameter_count() == 0
    again = build_word_embedding(config)
    again.special_tokens.load_state_dict(emb.special_tokens.state_dict())
    assert torch.equal(again(ids, **features), out)  # deterministic from the seed


@pytest.mark.parametrize("embedding,options", [
    ("hash_emb", {"buckets": 31}), ("hash_pool", {}), ("hash_add", {"hash": "lsh"}), ("hash_proj", {}),
    ("proformer", {"bits": 100}), ("eelbert", {}), ("bert_hash", {"projections": 3}),
])
def test_shuffle_random_model_trains_with_every_embedding(embedding, options, tmp_path):
    torch.manual_seed(0)
    config = ModelConfig(**{**TINY, "vocab_size": 300}, embedding=embedding, embedding_options=options)
    texts = ["the cat sat on the mat today", "a dog ran far away from home"]
    if embedding == "bert_hash":  # vocabulary ids, no codebook
        assert codebook_settings(config) is None
        book = HashCodebook(MD5Hasher())
    else:
        book = HashCodebook.for_model(config, Counter(w for t in texts for w in word_tokenize(t)))
        assert book.n_bits == options.get("bits", 128) and book.n_buckets == options.get("buckets")
    ids = torch.tensor(book.encode(texts, max_len=9, add_special_tokens=True))
    features = book.features(ids, embedding_features(config), config.embedding_options)
    labels = torch.randint(0, 3, ids.shape)
    model = build_model(config, "shuffle_random")
    loss = model(input_ids=ids, labels=labels, **features)["loss"]
    loss.backward()
    words = model.encoder.embeddings.word_embeddings
    trained = [n for n, p in words.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    assert trained, "no word-embedding parameter got a gradient"
    model.eval()
    save_checkpoint(model, config, tmp_path / "ckpt")
    again = load_model(tmp_path / "ckpt").eval()
    torch.testing.assert_close(again(input_ids=ids, **features)["logits"],
                               model(input_ids=ids, **features)["logits"])


def test_registry_lists_every_variant():
    assert set(EMBEDDINGS.names()) >= {"standard", "hash_emb", "hash_pool", "hash_add", "hash_proj",
                                       "proformer", "bert_hash", "eelbert"}
