"""Ch. 2 hashing (leanlm.hashing): word tokens, HMAC-MD5 (the thesis's example), LSH, the codebook."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from leanlm.errors import ConfigError, DataError
from leanlm.hashing import HashCodebook, LSHHasher, MD5Hasher, NgramVocabulary, word_tokenize
from leanlm.hashing.lsh import _circulant_argmax
from leanlm.hashing.md5 import digest_bits, digest_buckets, hexdigest_bucket, md5_digests
from leanlm.hashing.ngrams import char_ngrams, ngram_rolling_hashes, rolling_hash

CORPUS = ("The children play in the park. She plays the piano; they played chess!! "
          "Players were playing games while the zebra ate cement near 42 old houses. "
          "Play it again, and again: playful plays replay.").split(". ")


def test_word_tokenize_lowercases_and_splits_words_from_punctuation():
    assert word_tokenize("[CLS] Don't STOP!! [SEP] x[MASK]") == \
        ["[CLS]", "don", "'", "t", "stop", "!!", "[SEP]", "x", "[MASK]"]
    assert word_tokenize("Hello, World...") == ["hello", ",", "world", "..."]


# §2.3.2 prints MD5('play') and MD5('plays') (the 'plays' digest is missing a character in the
# thesis; the poster prints all 32). Neither is MD5 or HMAC-MD5 with the official key b"en" of the
# word, so the secret key behind them is unknown; the example still fixes how a digest becomes an
# embedding index ("transform its binary value into decimal and then compute i = v % N") and bits.
THESIS_DIGESTS = {"play": "d077f244def8a70e5ea758bd8352fcd8",
                  "plays": "4a258d930b7d3409982d727ddbb4ba88"}


@pytest.mark.parametrize("n_buckets", [50_260, 1_037, 7, 2**31 - 1])
def test_thesis_md5_example_digest_to_index_and_bits(n_buckets):
    digests = np.stack([np.frombuffer(bytes.fromhex(h), dtype=np.uint8) for h in THESIS_DIGESTS.values()])
    expected = [int(h, 16) % n_buckets for h in THESIS_DIGESTS.values()]
    assert digest_buckets(digests, n_buckets).tolist() == expected
    assert [hexdigest_bucket(h, n_buckets) for h in THESIS_DIGESTS.values()] == expected
    bits = digest_bits(digests)
    for row, h in zip(bits, THESIS_DIGESTS.values()):
        assert "".join(map(str, row)) == format(int(h, 16), "0128b")  # most significant bit first
    # The example's point: 'play' and 'plays' get unrelated hashes.
    assert expected[0] != expected[1] or n_buckets == 7
    assert int((bits[0] != bits[1]).sum()) > 40


def test_md5_hasher_is_hmac_md5_with_the_official_key():
    hasher = MD5Hasher()
    assert hmac.new(b"en", b"play", hashlib.md5).hexdigest() == "95ea122b0b72902c5a95d7ba740ff838"
    bits = hasher.bits(["play", "plays", "naïve"])
    for row, token in zip(bits, ["play", "plays", "naïve"]):
        value = int(hmac.new(b"en", token.encode("utf-8"), hashlib.md5).hexdigest(), 16)
        assert "".join(map(str, row)) == format(value, "0128b")
        assert hasher.buckets([token], 50_260)[0] == value % 50_260
    assert not np.array_equal(MD5Hasher(key=b"de").bits(["play"]), bits[:1])
    with pytest.raises(ConfigError):
        MD5Hasher(n_bits=129)


def test_digest_buckets_match_python_integers_on_many_tokens():
    tokens = [f"w{i}" for i in range(500)]
    digests = md5_digests(tokens)
    for n in (3, 1_037, 50_260, 4_294_967_291):
        want = [int.from_bytes(d.tobytes(), "big") % n for d in digests]
        assert digest_buckets(digests, n).tolist() == want


def test_rolling_hashes_of_character_ngrams():
    assert char_ngrams("play", 2) == ["p", "l", "a", "y", "pl", "la", "ay"]
    assert rolling_hash("ab") == (ord("a") * 31 + ord("b")) % (10**9 + 7)
    table = ngram_rolling_hashes(["played", "a"], n_max=3, max_chars=5)
    assert table.shape == (2, 3, 5)
    assert table[0, 2].tolist() == [rolling_hash(g) for g in ["pla", "lay", "aye"]] + [-1, -1]  # cut at 5
    assert table[1, 0, 0] == ord("a") and (table[1, 1:] == -1).all()


def hamming(bits, a, b):
    return int((bits[a] != bits[b]).sum())


def test_lsh_puts_inflections_closer_than_unrelated_words():
    words = ["play", "plays", "played", "zebra", "cement", "of", "houses"]
    counts = Counter(t for line in CORPUS for t in word_tokenize(line))
    for seed in range(3):
        bits = LSHHasher.fit(counts, n_bits=128, seed=seed).bits(words)
        related = max(hamming(bits, 0, 1), hamming(bits, 0, 2))
        unrelated = min(hamming(bits, 0, k) for k in range(3, len(words)))
        assert related < unrelated, (seed, related, unrelated)


def test_lsh_buckets_equal_the_dense_circulant_argmax():
    counts = Counter(t for line in CORPUS for t in word_tokenize(line))
    hasher = LSHHasher.fit(counts, seed=3)
    tokens = sorted(counts) + ["unseen", "qqq"]
    for n_buckets in (37, len(hasher.vocabulary) + 5):
        eta = hasher.rotator(n_buckets)
        d_x = len(hasher.vocabulary)
        # r^i[f] = eta[(f + i) mod len(eta)], i = 1..N: r^1 = [eta_2, ..., eta_1] when len(eta) = d_x.
        R = np.stack([eta[(np.arange(d_x) + i) % eta.size] for i in range(1, n_buckets + 1)], axis=1)
        x = hasher.vocabulary.features(tokens).toarray()
        assert hasher.buckets(tokens, n_buckets, chunk_elements=4096).tolist() == np.argmax(x @ R, 1).tolist()
    assert np.array_equal(hasher.vocabulary.features(["play"]).toarray().sum(), len(char_ngrams("play")) -
                          sum(g not in hasher.vocabulary.index for g in char_ngrams("play")))


def _reference_buckets(x, eta, n_buckets, chunk_elements=1 << 22):
    """The first LSHHasher._buckets (kept here, not in the package, as the bit-identity reference):
    per chunk of rows, gather the [|used n-grams|, N] rows of R from eta and let SciPy's
    ``csr @ dense`` kernel sum them."""
    offsets = np.arange(1, n_buckets + 1, dtype=np.int64)
    n_rows = x.shape[0]
    out = np.zeros(n_rows, dtype=np.int64)
    rows_per_chunk = max(1, chunk_elements // (n_buckets * (x.nnz // max(1, n_rows) + 1)))
    for start in range(0, n_rows, rows_per_chunk):
        block = x[start:start + rows_per_chunk]
        used = np.unique(block.indices)
        if used.size == 0:
            continue
        columns = eta[(used[:, None] + offsets[None, :]) % eta.size]
        local = sp.csr_matrix((block.data, np.searchsorted(used, block.indices), block.indptr),
                              shape=(block.shape[0], used.size))
        out[start:start + block.shape[0]] = np.asarray(local @ columns).argmax(axis=1)
    return out


def _random_words(n, seed):
    """0-30 characters from a Zipf-skewed alphabet, so n-grams repeat within a word (counts > 1)."""
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("etaoinshrdlucmfwypvbgkjqxzé"))
    p = 1.0 / np.arange(1, alphabet.size + 1)
    lengths = rng.integers(0, 31, size=n)
    letters = alphabet[rng.choice(alphabet.size, size=int(lengths.sum()), p=p / p.sum())]
    return ["".join(w) for w in np.split(letters, np.cumsum(lengths)[:-1])]


@pytest.fixture(scope="module")
def lsh_vocabularies():
    """A paper-size n-gram vocabulary (d_x = 50,000) and a small one (d_x = 1,500)."""
    big = LSHHasher.fit(Counter(_random_words(6000, 1)), seed=4)
    small = LSHHasher.fit(Counter(_random_words(300, 2)), size=1500, seed=5)
    assert (len(big.vocabulary), len(small.vocabulary)) == (50_000, 1_500)
    return {"big": big, "small": small}


# N below and above d_x for both vocabularies; fewer words where the reference is slow (large N).
@pytest.mark.parametrize("vocab,n_buckets,n_words", [
    ("big", 1_000, 3000), ("big", 4_096, 800), ("big", 50_000, 100), ("big", 50_007, 50),
    ("small", 7, 3000), ("small", 1_000, 3000), ("small", 4_096, 2000), ("small", 50_000, 150)])
def test_lsh_buckets_are_bit_identical_to_the_scipy_reference(lsh_vocabularies, vocab, n_buckets, n_words):
    hasher = lsh_vocabularies[vocab]
    words = _random_words(n_words, seed=n_buckets) + ["", "ÿÿÿ", "!?"]  # + all-zero feature rows
    x = hasher.vocabulary.features(words)
    assert x.data.max() > 1 and (np.diff(x.indptr) == 0).sum() >= 3  # counts > 1 and empty rows occur
    want = _reference_buckets(x, hasher.rotator(n_buckets), n_buckets)
    assert want.min() >= 0 and want.max() < n_buckets
    assert np.array_equal(hasher.buckets(words, n_buckets), want)
    assert np.array_equal(hasher.bits_and_buckets(words, n_buckets)[1], want)
    assert (want[-3:] == 0).all()  # no known n-gram: bucket 0
    # Small blocks (the per-position kernel) and one row at a time (the per-row kernel) agree too.
    for chunk_elements in (4 * n_buckets + 3, 1):
        assert np.array_equal(hasher.buckets(words[:400], n_buckets, chunk_elements), want[:400])


def _count_matrix(n_rows, d_x, seed):
    """Random counts 1..3, every 7th row all-zero."""
    x = sp.random(n_rows, d_x, density=0.1, format="csr", random_state=seed, dtype=np.float64)
    x.data = np.ceil(x.data * 3)
    x = sp.diags((np.arange(n_rows) % 7 != 0).astype(np.float64)) @ x
    x.eliminate_zeros()
    return x.tocsr()


def _circulant(eta, d_x, n_buckets):
    return np.stack([eta[(np.arange(d_x) + i) % eta.size] for i in range(1, n_buckets + 1)], axis=1)


# (40, 1 << 22) and (40, 200): the per-position kernel in one block / in blocks of 5 rows;
# (40, 1) and (3000, ...): the per-row kernel.
KERNELS = [(40, 1 << 22), (40, 200), (40, 1), (3000, 1 << 22)]


@pytest.mark.parametrize("n_buckets,chunk_elements", KERNELS)
def test_circulant_argmax_breaks_ties_to_the_lowest_bucket(n_buckets, chunk_elements):
    d_x = 60
    # A small-integer eta of period 6: scores are exact in any summation order, and every score
    # recurs every 6 buckets, so each row's maximum is tied many times.
    period = np.random.default_rng(n_buckets).integers(-3, 4, size=6).astype(np.float64)
    eta = np.tile(period, max(d_x, n_buckets) // 6 + 1)[:max(d_x, n_buckets)]
    x = _count_matrix(500, d_x, seed=1)
    scores = x.toarray() @ _circulant(eta, d_x, n_buckets)
    assert ((scores == scores.max(1, keepdims=True)).sum(1) > 1).all()  # every row ties
    want = scores.argmax(1)  # the first maximum
    assert (want[::7] == 0).all() and want.max() > 0
    assert np.array_equal(_reference_buckets(x, eta, n_buckets), want)
    assert np.array_equal(_circulant_argmax(x, eta, n_buckets, chunk_elements), want)


@pytest.mark.parametrize("n_buckets,chunk_elements", KERNELS)
def test_circulant_argmax_sums_in_csr_order_like_scipy(n_buckets, chunk_elements):
    rng = np.random.default_rng(n_buckets)
    d_x = 60
    # +-2^53 next to small values: each score's rounding depends on the order of its terms.
    eta = rng.choice([2.0**53, -2.0**53, 1.0, 3.0, -1.0, 0.5], size=max(d_x, n_buckets))
    x = _count_matrix(500, d_x, seed=2)
    # Non-canonical CSR (indices shuffled within rows, one entry repeated): the sums follow the
    # stored order, as SciPy's kernel does.
    indices, data, indptr = x.indices.copy(), x.data.copy(), x.indptr
    for row in range(x.shape[0]):
        lo, hi = indptr[row], indptr[row + 1]
        perm = rng.permutation(hi - lo) + lo
        indices[lo:hi], data[lo:hi] = indices[perm], data[perm]
    x = sp.csr_matrix((np.r_[data, 2.0], np.r_[indices, indices[-1]], np.r_[indptr[:-1], indptr[-1] + 1]),
                      shape=x.shape)
    assert not x.has_sorted_indices
    want = _reference_buckets(x, eta, n_buckets)
    # The order matters here: sorted indices or a dense product change some argmaxes.
    assert (_reference_buckets(x.sorted_indices(), eta, n_buckets) != want).any()
    assert ((x.toarray() @ _circulant(eta, d_x, n_buckets)).argmax(1) != want).any()
    assert np.array_equal(_circulant_argmax(x, eta, n_buckets, chunk_elements), want)


def test_lsh_buckets_reject_a_non_positive_count():
    hasher = LSHHasher.fit(Counter(["play"]))
    with pytest.raises(ConfigError):
        hasher.buckets(["play"], 0)


def test_ngram_vocabulary_keeps_the_most_frequent_and_round_trips(tmp_path):
    vocab = NgramVocabulary.fit(Counter({"aab": 3, "b": 1}), size=3)
    assert vocab.ngrams == ["a", "b", "aa"]  # a: 6, b: 4, aa/aab/ab: 3 (ties by the n-gram)
    vocab.save(tmp_path / "v.json")
    assert NgramVocabulary.load(tmp_path / "v.json").ngrams == vocab.ngrams
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DataError):
        NgramVocabulary.load(tmp_path / "bad.json")


# Runs without torch (leanlm.hashing loads lazily), so the two processes start fast.
SCRIPT = """
import json, sys
from collections import Counter
from leanlm.hashing import LSHHasher, MD5Hasher, word_tokenize
corpus = json.loads(sys.argv[1])
tokens = list(dict.fromkeys(t for line in corpus for t in word_tokenize(line)))
lsh = LSHHasher.fit(Counter(t for line in corpus for t in word_tokenize(line)), seed=5)
out = {"tokens": tokens}
for name, hasher in (("md5", MD5Hasher()), ("lsh", lsh)):
    out[name] = {"bits": hasher.bits(tokens).tolist(), "buckets": hasher.buckets(tokens, 101).tolist()}
print(json.dumps(out))
"""


def test_hashes_are_identical_across_processes():
    # Two processes with different string-hash seeds: nothing may depend on Python's hash().
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(CORPUS)],
                              env={**os.environ, "PYTHONHASHSEED": seed}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in ("1", "2")]
    runs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        runs.append(json.loads(out))
    assert runs[0] == runs[1]
    # ... and this process (the codebook gathers the same hashes, rows in first-seen order).
    counts = Counter(t for line in CORPUS for t in word_tokenize(line))
    for name, hasher in (("md5", MD5Hasher()), ("lsh", LSHHasher.fit(counts, seed=5))):
        book = HashCodebook(hasher, n_buckets=101)
        ids = [i for row in book.encode(CORPUS) for i in row]
        assert [book.tokens[i] for i in dict.fromkeys(ids)] == runs[0]["tokens"]
        rows = torch.tensor(list(dict.fromkeys(ids)))
        assert book.bits(rows).int().tolist() == runs[0][name]["bits"]
        assert book.buckets(rows).tolist() == runs[0][name]["buckets"]


def test_codebook_rows_specials_growth_and_gathered_features():
    book = HashCodebook(MD5Hasher(), n_buckets=1_037)
    assert book.tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ids = book.encode(["Play, play!", "[CLS] plays [SEP]"], max_len=3)
    assert ids == [[5, 6, 5], [2, 7, 3]]
    assert book.encode(["a b c d"], max_len=4, add_special_tokens=True) == [[2, 8, 9, 3]]
    batch = torch.tensor([[5, 7, 0], [2, 8, 9]])
    bits, buckets = book.bits(batch), book.buckets(batch)
    assert bits.shape == (2, 3, 128) and bits.dtype == torch.float32
    assert torch.equal(bits[0, 0], torch.from_numpy(MD5Hasher().bits(["play"])[0]).float())
    assert (bits[0, 2] == 0).all() and buckets[0, 2] == 0  # [PAD]
    assert buckets[0, 1] == MD5Hasher().buckets(["plays"], 1_037)[0]
    features = book.features(batch, ["hash_bits", "hash_buckets", "char_ngram_hashes"], {"ngram": 2})
    assert features["char_ngram_hashes"].shape == (2, 3, 2, 16)
    assert (features["char_ngram_hashes"][0, 2] == -1).all()
    with pytest.raises(DataError):
        book.bits(torch.tensor([len(book)]))
    with pytest.raises(ConfigError):
        HashCodebook(MD5Hasher()).buckets(batch)
    assert (book.random_ids((1000,), torch.Generator().manual_seed(0)) >= 5).all()


def test_codebook_grows_past_its_capacity_and_round_trips(tmp_path):
    counts = Counter(t for line in CORPUS for t in word_tokenize(line))
    book = HashCodebook(LSHHasher.fit(counts, seed=1), n_buckets=53)
    book.encode(CORPUS)
    book.encode([" ".join(f"tok{i}" for i in range(200))])  # beyond the initial 64 rows
    book.save(tmp_path / "cb")
    again = HashCodebook.load(tmp_path / "cb")
    everything = torch.arange(len(book))
    assert again.tokens == book.tokens
    assert torch.equal(again.bits(everything), book.bits(everything))
    assert torch.equal(again.buckets(everything), book.buckets(everything))
    assert again.encode(["brand new words"]) == book.encode(["brand new words"])
    (tmp_path / "cb" / "codebook.json").write_text("{}")
    with pytest.raises(DataError):
        HashCodebook.load(tmp_path / "cb")


def test_bpe_route_hashes_pieces(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(CORPUS * 3, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    book = HashCodebook(MD5Hasher(), tokenizer=tokenizer)
    text = "players replay"
    pieces = tokenizer.encode(text, add_special_tokens=False).tokens
    assert len(pieces) > 2  # pieces, not words
    ids = book.encode([text])[0]
    assert [book.tokens[i] for i in ids] == pieces
    assert np.array_equal(book.bits(torch.tensor(ids)).numpy(), MD5Hasher().bits(pieces).astype(np.float32))
    book.save(tmp_path / "bpe")
    assert HashCodebook.load(tmp_path / "bpe").encode([text])[0] == ids
