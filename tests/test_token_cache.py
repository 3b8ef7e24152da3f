"""The cross-job cache of a corpus split's token ids (training/token_cache.py)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from leanlm.errors import DataError
from leanlm.training import token_cache
from leanlm.training.text_batches import tokenize_documents

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


def test_second_call_reads_the_cache(split, tmp_path, monkeypatch):
    tok = _tokenizer()
    first = token_cache.corpus_token_ids(tok, split, "t")
    assert first == tokenize_documents(tok, TEXTS, "t") and [] in first  # empty documents kept
    assert len(list((tmp_path / "cache" / "tokenized").glob("*.npz"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("tokenised again instead of reading the cache")

    monkeypatch.setattr(token_cache, "tokenize_documents", refuse)
    assert token_cache.corpus_token_ids(tok, split, "t") == first


def test_changed_corpus_or_tokenizer_gets_a_new_key(split):
    tok = _tokenizer()
    key = token_cache.cache_key(tok, split)
    assert token_cache.cache_key(_tokenizer(vocab_size=45), split) != key
    split.write_text(split.read_text() + json.dumps({"text": "one more line"}) + "\n")
    assert token_cache.cache_key(tok, split) != key
    assert token_cache.corpus_token_ids(tok, split, "t")[-1] == tok.encode("one more line", add_special_tokens=False).ids


def test_damaged_cache_is_rebuilt(split, tmp_path):
    tok = _tokenizer()
    expected = token_cache.corpus_token_ids(tok, split, "t")
    (entry,) = (tmp_path / "cache" / "tokenized").glob("*.npz")
    entry.write_bytes(b"not an npz file")
    assert token_cache.corpus_token_ids(tok, split, "t") == expected
    assert entry.read_bytes()[:2] == b"PK"  # rewritten as a real archive


def test_uncacheable_tokenizer_and_missing_split(split, tmp_path):
    class Plain:  # no to_str: never cached
        def encode_batch(self, texts, add_special_tokens=False):
            return [type("E", (), {"ids": [len(t)]})() for t in texts]

    assert token_cache.corpus_token_ids(Plain(), split, "t") == [[len(t)] for t in TEXTS]
    assert not (tmp_path / "cache" / "tokenized").exists()
    with pytest.raises(DataError, match="missing"):
        token_cache.corpus_token_ids(_tokenizer(), tmp_path / "absent.jsonl", "t")
