"""Ch. 2's hash runs packed from memory-mapped row-id streams (hashing/codebook_streams.py): the same
codebook, rows, features and pretraining batches as the in-memory packing they replace (kept here as the
reference), built once per (codebook, corpus), shared across hashers, rebuilt when damaged."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from leanlm.config import load_config
from leanlm.data.pretrain_data import run_data
from leanlm.errors import DataError
from leanlm.hashing import HashCodebook
from leanlm.hashing.words import SPECIAL_TOKENS
from leanlm.modeling.hash_features import codebook_settings, embedding_features
from leanlm.runs import get_run, pretrain_settings
from leanlm.training import eos_packing
from leanlm.hashing import codebook_streams
from leanlm.hashing.codebook_streams import codebook_corpus
from leanlm.hashing.inputs import _model_config, _tokenizer_for, corpus_token_counts, with_features
from leanlm.training.run_tokenizer import subword_tokenizer
from leanlm.training.objectives import pack_sequences
from leanlm.plugins import OBJECTIVES
from leanlm.training.text_batches import read_documents, tokenize_documents

from test_ch2_pipeline import _texts, _write_jsonl, tiny_project  # noqa: F401  (a fixture)

torch.set_num_threads(1)

RUNS = ["ch2_hashformers-md5_emb_1k", "ch2_hashformers-md5_proj", "ch2_hashformers-lsh_emb_50k",
        "ch2_hashformers-lsh_pool", "ch2_subword-md5_emb_50k", "ch2_subword-lsh_proj", "ch2_related-eelbert"]


@pytest.fixture
def project(tiny_project, tmp_path, monkeypatch):
    """The tiny ch. 2 project with a corpus that has empty documents, literal special tokens, new words in
    validation and more documents than one encode chunk holds."""
    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(eos_packing, "ENCODE_CHUNK", 7)
    corpus = tiny_project / "data/smoke/corpus"
    train = _texts(30, 25, 0)
    train[3], train[11] = "", "Zebra [SEP] quux, [CLS] Ünïcode!"
    valid = _texts(5, 30, 1) + ["brand-new words only here.", ""]
    _write_jsonl(corpus / "train.jsonl", [{"text": t} for t in train])
    _write_jsonl(corpus / "validation.jsonl", [{"text": t} for t in valid])
    return tiny_project


def _in_memory(config, run, seq_len):
    """The packing this replaces (leanlm before the streams): the split's texts in memory, the codebook
    fitted on all of them at once, per-document id lists and pack_sequences' int64 tensor."""
    corpus = run_data(config, run).corpus_dir
    texts = read_documents(corpus / "train.jsonl")
    model_config = _model_config(run)
    counts = None
    if codebook_settings(model_config)["hash"] == "lsh":
        counts = corpus_token_counts(texts, subword_tokenizer(config, run) if run.tokenizer == "hash_subword" else None)
    tok = _tokenizer_for(run, HashCodebook.for_model(model_config, token_counts=counts), config)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    train = pack_sequences(tokenize_documents(tok, texts, "train"), seq_len, cls, sep)
    valid = pack_sequences(tokenize_documents(tok, read_documents(corpus / "validation.jsonl"), "v"), seq_len, cls, sep)
    return tok, train, valid


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory map (not a copy in memory)."""
    while array is not None and not isinstance(array, np.memmap):
        array = getattr(array, "base", None)
    return array is not None


@pytest.mark.parametrize("run_id", RUNS)
def test_streamed_rows_batches_and_codebook_equal_the_in_memory_ones(project, run_id):
    config = load_config("params/smoke.yaml")
    run = get_run(config, run_id)
    settings = pretrain_settings(config, run)
    seq_len = settings["seq_len"]
    old_tok, old_train, old_valid = _in_memory(config, run, seq_len)
    new = codebook_corpus(config, run, run_data(config, run).corpus_dir, seq_len)
    old_book, new_book = old_tok.codebook, new.tokenizer.codebook
    assert new_book.tokens == old_book.tokens and new.tokenizer.get_vocab_size() == old_tok.get_vocab_size()
    assert np.array_equal(new_book._packed, old_book._packed) and np.array_equal(new_book._buckets, old_book._buckets)
    assert new_book.fingerprint() == old_book.fingerprint()
    assert torch.equal(new.train[:], old_train) and torch.equal(new.validation[:], old_valid)
    assert len(old_train) > 8
    if run.tokenizer == "hash":  # the literal [SEP]/[CLS] in a document took their special rows
        assert {"zebra", "quux", "ünïcode", "brand"} <= set(new_book.tokens)
    # The objective's batches (masks, random rows, features) are the same tensors.
    objective = OBJECTIVES.get(run.objective)()
    model_config = _model_config(run)
    assert embedding_features(model_config)
    old_batches = with_features(objective.batches(settings, old_tok, old_train, 0), model_config, old_tok)
    new_batches = with_features(objective.batches(settings, new.tokenizer, new.train, 0), model_config, new.tokenizer)
    for step, micro in [(0, 0), (1, 0), (7, 0), (40, 0)]:  # step 40 is past the first epoch
        old, fresh = old_batches(step, micro), new_batches(step, micro)
        assert old.keys() == fresh.keys()
        for key in old:
            assert torch.equal(old[key], fresh[key]), (step, key)
    generator = [torch.Generator().manual_seed(5) for _ in range(2)]
    old, fresh = old_batches.masked(old_valid[:4], generator[0]), new_batches.masked(new.validation[:4], generator[1])
    assert all(torch.equal(old[k], fresh[k]) for k in old)


def test_streams_are_built_once_shared_by_hashers_and_rebuilt_when_damaged(project, tmp_path, monkeypatch):
    config = load_config("params/smoke.yaml")
    corpus = project / "data/smoke/corpus"
    md5, lsh = get_run(config, "ch2_hashformers-md5_proj"), get_run(config, "ch2_hashformers-lsh_proj")
    first = codebook_corpus(config, md5, corpus, 16)
    books = tmp_path / "cache" / "codebooks"
    words = sorted(books.glob("words-*"))
    assert len(words) == 1 and len(sorted(books.glob("codebook-*"))) == 1
    codebook_corpus(config, lsh, corpus, 16)  # another hasher: its own codebook, the same word rows
    assert sorted(books.glob("words-*")) == words and len(sorted(books.glob("codebook-*"))) == 2

    def fail(*_, **__):
        raise AssertionError("built again")

    with monkeypatch.context() as patch:  # a second job maps the cached streams and codebook
        patch.setattr(codebook_streams.WordStreams, "build", fail)
        patch.setattr(codebook_streams, "fit_codebook", fail)
        again = codebook_corpus(config, md5, corpus, 16)
    assert torch.equal(again.train[:], first.train[:]) and _mapped(again.train.rows)

    stream = words[0] / "train.sep.uint32"
    stream.write_bytes(stream.read_bytes()[:-4])  # truncated copy: rebuilt, not trusted
    rebuilt = codebook_corpus(config, md5, corpus, 16)
    assert torch.equal(rebuilt.train[:], first.train[:])
    # Overwritten with bytes of the right size (issue 16): the SHA-256 differs, so it is rebuilt too.
    good = stream.read_bytes()
    stream.write_bytes(bytes(reversed(good)))
    rebuilt = codebook_corpus(config, md5, corpus, 16)
    assert torch.equal(rebuilt.train[:], first.train[:]) and stream.read_bytes() == good

    # A changed corpus is a new key: never a stale stream.
    _write_jsonl(corpus / "train.jsonl", [{"text": t} for t in _texts(30, 25, 9)])
    codebook_corpus(config, md5, corpus, 16)
    assert len(sorted(books.glob("words-*"))) == 2

    for record in books.glob("codebook-*/fitted.json"):  # a codebook that is not the one recorded
        record.write_text(json.dumps({**json.loads(record.read_text()), "fingerprint": "0" * 64}))
    with pytest.raises(DataError, match="disagrees with fitted.json"):
        codebook_corpus(config, md5, corpus, 16)


def test_codebook_fingerprint_names_what_decides_the_hashes(project):
    config = load_config("params/smoke.yaml")
    corpus = project / "data/smoke/corpus"
    books = {r: codebook_corpus(config, get_run(config, r), corpus, 16).tokenizer.codebook
             for r in ("ch2_hashformers-md5_proj", "ch2_hashformers-md5_emb_1k", "ch2_hashformers-lsh_proj")}
    prints = {r: b.fingerprint() for r, b in books.items()}
    assert len(set(prints.values())) == 3
    empty = HashCodebook(books["ch2_hashformers-lsh_proj"].hasher, None)
    assert empty.fingerprint() == prints["ch2_hashformers-lsh_proj"]  # rows are the corpus's, not the hasher's


def test_too_small_corpus_and_missing_split_are_named(project):
    config = load_config("params/smoke.yaml")
    corpus = project / "data/smoke/corpus"
    run = get_run(config, "ch2_hashformers-md5_proj")
    with pytest.raises(DataError, match=r"validation.jsonl: no full sequence of 400 tokens"):
        codebook_corpus(config, run, corpus, 400)
    (corpus / "validation.jsonl").unlink()
    with pytest.raises(DataError, match="validation.jsonl is missing"):
        codebook_corpus(config, run, corpus, 16)


def test_word_rows_number_tokens_as_the_codebook_does():
    rows = codebook_streams.WordRows()
    ids = [e.ids for e in rows.encode_batch(["b a [SEP] b", "", "c a"])]
    book = HashCodebook(__import__("leanlm.hashing", fromlist=["MD5Hasher"]).MD5Hasher())
    assert ids == book.encode(["b a [SEP] b", "", "c a"]) and rows.tokens == book.tokens
    assert rows.tokens[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)


def test_hash_pretraining_packs_from_the_streams(project, tmp_path):
    from leanlm.stages.pretrain import pretrain

    config = load_config("params/smoke.yaml")
    run = get_run(config, "ch2_hashformers-md5_emb_1k")
    _, old_train, old_valid = _in_memory(config, run, pretrain_settings(config, run)["seq_len"])
    record = pretrain(config, run.run_id)
    assert (record["data"]["train_sequences"], record["data"]["validation_sequences"]) == (len(old_train), len(old_valid))
    books = tmp_path / "cache" / "codebooks"
    assert len(list(books.glob("words-*/train.sep.uint32"))) == 1 and len(list(books.glob("codebook-*/fitted.json"))) == 1
