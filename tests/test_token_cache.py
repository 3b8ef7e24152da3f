"""The key of a corpus split's cached token stream (training/token_cache.py)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from leanlm.training import token_cache

TEXTS = ["the river flows past the old mill", "a mill stood by the river", "", "old stones and new stones"]


def _tokenizer(vocab_size: int = 60) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"]))
    return tok


@pytest.fixture
def split(tmp_path, monkeypatch):
    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return path


def test_changed_corpus_or_tokenizer_gets_a_new_key(split):
    tok = _tokenizer()
    key = token_cache.cache_key(tok, split)
    assert token_cache.cache_key(_tokenizer(vocab_size=45), split) != key
    split.write_text(split.read_text() + json.dumps({"text": "one more line"}) + "\n")
    assert token_cache.cache_key(tok, split) != key


def test_a_recorded_digest_is_used_and_an_unfingerprintable_tokenizer_has_no_key(split):
    """DIGESTS.json beside a split (named corpora) spares hashing it again, for the same byte size only;
    a tokenizer without a serialised form (ch. 2's codebooks) gets no key (never cached)."""
    (split.parent / "DIGESTS.json").write_text(json.dumps({split.name: {"sha256": "ab" * 32,
                                                                         "bytes": split.stat().st_size}}))
    assert token_cache.split_digest(split) == "ab" * 32
    split.write_text(split.read_text() + "\n")
    assert token_cache.split_digest(split) != "ab" * 32  # the file changed size: computed again
    assert token_cache.cache_key(object(), split) is None
