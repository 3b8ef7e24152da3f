"""[CLS]/[SEP] packing streamed from a memory-mapped ``d1 SEP d2 ...`` token stream (training/eos_packing.py):
exactly pack_sequences' rows, a cache per (tokenizer, split, separator, packing) reused across calls and
rebuilt when damaged, and pretraining through ``_pack`` on it."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from leanlm.errors import ConfigError, DataError
from leanlm.training import eos_packing
from leanlm.training.eos_packing import StreamRows, eos_packed_rows, pack_with_eos, sep_packed_rows, streamable
from leanlm.training.objectives import pack_sequences
from leanlm.training.text_batches import read_documents, tokenize_documents

from test_ch2_pipeline import tiny_project  # noqa: F401  (the ch. 2 tiny smoke project, a fixture)

torch.set_num_threads(1)
CLS, SEP = 2, 3


class IdTokenizer:
    """A fingerprintable tokenizer whose texts are their ids ("5 6 7" -> [5, 6, 7]); counts encode calls."""

    def __init__(self, vocab_size: int):
        self.vocab_size, self.calls = vocab_size, 0

    def to_str(self) -> str:
        return f"ids up to {self.vocab_size}"

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return self.vocab_size

    def no_truncation(self) -> None:
        pass

    def no_padding(self) -> None:
        pass

    def encode_batch(self, texts, add_special_tokens=False):
        self.calls += 1
        return [SimpleNamespace(ids=[int(t) for t in text.split()]) for text in texts]


def _documents(vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Empty documents (first, between, last), one longer than any row, short ones; 44 tokens joined with
    one [SEP] between the 5 non-empty ones: a tail for bodies of 6 and 14, none for bodies of 1."""
    rng = np.random.default_rng(seed)
    low = vocab_size - 30_000 if vocab_size > 1 << 16 else 5  # uint32 streams carry ids above 65,535

    def draw(n: int) -> list[int]:
        return rng.integers(low, vocab_size, n).tolist()

    return [[], [], draw(1), draw(25), [], draw(3), draw(7), draw(4), []]


def _split(path, docs):
    path.write_text("".join(json.dumps({"text": " ".join(map(str, d))}) + "\n" for d in docs))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokenized"


# ------------------------------------------------------------------------------------- the rows
@pytest.mark.parametrize("vocab_size,dtype", [(1000, "uint16"), (100_000, "uint32")])
@pytest.mark.parametrize("seq_len", [3, 8, 16])
def test_rows_are_pack_sequences_rows(cache, tmp_path, monkeypatch, vocab_size, dtype, seq_len):
    monkeypatch.setattr(eos_packing, "ENCODE_CHUNK", 2)  # separators carried across encode chunks
    docs = _documents(vocab_size)
    tok = IdTokenizer(vocab_size)
    rows = sep_packed_rows(tok, _split(tmp_path / "train.jsonl", docs), seq_len, CLS, SEP, "t")
    expected = pack_sequences(docs, seq_len, CLS, SEP)
    assert isinstance(rows, StreamRows) and len(rows) == len(expected) > 0 and rows.shape == tuple(expected.shape)
    assert rows[:].dtype == torch.int64 and torch.equal(rows[:], expected)
    if seq_len > 3:
        assert sum(len(d) for d in docs) + 4 > len(expected) * (seq_len - 2)  # a tail was dropped
    (stream,) = cache.glob(f"*.sep.{dtype}")
    joined = np.fromfile(stream, dtype=dtype)
    nonempty = [d for d in docs if d]
    assert joined.tolist() == sum((d + [SEP] for d in nonempty[:-1]), []) + nonempty[-1]  # d1 SEP d2 ... d5


def test_indexing_like_a_tensor(cache, tmp_path):
    docs = _documents(1000, seed=1)
    rows = sep_packed_rows(IdTokenizer(1000), _split(tmp_path / "train.jsonl", docs), 8, CLS, SEP, "t")
    expected = pack_sequences(docs, 8, CLS, SEP)
    assert torch.equal(rows[2:5], expected[2:5]) and torch.equal(rows[::3], expected[::3])
    assert torch.equal(rows[0], expected[0]) and torch.equal(rows[-1], expected[-1])
    picks = torch.tensor([4, 0, 4, 6], dtype=torch.long)
    assert torch.equal(rows[picks], expected[picks])
    assert torch.equal(rows[np.array([1, 3])], expected[[1, 3]]) and torch.equal(rows[[5, 2]], expected[[5, 2]])
    assert rows[:0].shape == (0, 8)
    unwrapped = StreamRows(np.arange(10, dtype=np.uint32), 4)  # end-of-text rows are unchanged
    assert unwrapped[:].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


# ------------------------------------------------------------------------------------- the cache
def test_cache_is_reused_and_apart_from_the_eos_stream(cache, tmp_path):
    docs = _documents(1000, seed=2)
    split = _split(tmp_path / "train.jsonl", docs)
    tok = IdTokenizer(1000)
    first = sep_packed_rows(tok, split, 8, CLS, SEP, "t")[:]
    assert tok.calls == 1
    assert torch.equal(sep_packed_rows(tok, split, 16, CLS, SEP, "t")[:], pack_sequences(docs, 16, CLS, SEP))
    assert torch.equal(sep_packed_rows(tok, split, 8, CLS, SEP, "t")[:], first) and tok.calls == 1  # not re-tokenised
    # The end-of-text stream of the same split, even with the same separator id, is another file.
    eos = eos_packed_rows(tok, split, 8, SEP, "t")
    assert tok.calls == 2 and torch.equal(eos[:], pack_with_eos(docs, 8, SEP))
    streams = sorted(p.name for p in cache.iterdir() if not p.name.endswith((".json", ".lock")))
    assert len(streams) == 2
    assert streams[0].endswith(f"-eos{SEP}.eos.uint16") and streams[1].endswith(f"-sep{SEP}.sep.uint16")
    assert torch.equal(sep_packed_rows(tok, split, 8, CLS, SEP, "t")[:], first) and tok.calls == 2
    sep_packed_rows(tok, split, 8, CLS, 4, "t")  # another separator, another stream
    assert tok.calls == 3 and len(list(cache.glob("*.sep.uint16"))) == 2


@pytest.mark.parametrize("damage", ["truncate", "no record", "bad record"])
def test_damaged_cache_is_rebuilt(cache, tmp_path, damage):
    docs = _documents(1000, seed=3)
    split = _split(tmp_path / "train.jsonl", docs)
    tok = IdTokenizer(1000)
    expected = sep_packed_rows(tok, split, 8, CLS, SEP, "t")[:]
    (stream,) = cache.glob("*.sep.uint16")
    record = stream.with_name(stream.name + ".json")
    size = stream.stat().st_size
    if damage == "truncate":  # a whole token short: the size alone would not show it
        stream.write_bytes(stream.read_bytes()[:-2])
    elif damage == "no record":  # e.g. killed between the stream and its record
        record.unlink()
    else:
        record.write_text("{not json")
    assert torch.equal(sep_packed_rows(tok, split, 8, CLS, SEP, "t")[:], expected) and tok.calls == 2
    assert stream.stat().st_size == size and json.loads(record.read_text())["tokens"] * 2 == size


# ------------------------------------------------------------------------------------- errors
def test_errors(cache, tmp_path):
    tok = IdTokenizer(1000)
    split = _split(tmp_path / "train.jsonl", _documents(1000))
    with pytest.raises(ConfigError, match="seq_len=2 is too short to pack"):
        sep_packed_rows(tok, split, 2, CLS, SEP, "t")
    assert tok.calls == 0  # refused before tokenising
    with pytest.raises(DataError, match="no full sequence of 100 tokens"):
        sep_packed_rows(tok, split, 100, CLS, SEP, "t")
    empty = _split(tmp_path / "empty.jsonl", [[], []])
    with pytest.raises(DataError, match="no full sequence of 3 tokens"):
        sep_packed_rows(tok, empty, 3, CLS, SEP, "t")
    with pytest.raises(DataError, match="missing"):
        sep_packed_rows(tok, tmp_path / "absent.jsonl", 8, CLS, SEP, "t")


# ------------------------------------------------------------------------------------- pretraining
def _wordpiece(texts) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=80, special_tokens=specials))
    return tok


def test_pack_streams_fingerprintable_tokenizers_and_leaves_codebooks_to_codebook_streams(cache, tmp_path):
    from leanlm.hashing import HashCodebook, MD5Hasher
    from leanlm.hashing.inputs import CodebookTokenizer
    from leanlm.stages.packed_batches import pack_rows

    rng = random.Random(0)
    words = "the river flows past an old mill where stones lie".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(30)]
    split = tmp_path / "train.jsonl"
    split.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    wordpiece = _wordpiece(texts)
    rows = pack_rows(wordpiece, split, 12, "t")
    assert streamable(wordpiece) and isinstance(rows, StreamRows)
    cls, sep = wordpiece.token_to_id("[CLS]"), wordpiece.token_to_id("[SEP]")
    expected = pack_sequences(tokenize_documents(wordpiece, read_documents(split), "t"), 12, cls, sep)
    assert len(rows) == len(expected) > 10 and torch.equal(rows[:], expected)
    assert len(list(cache.glob("*.sep.uint16"))) == 1
    codebook = CodebookTokenizer(HashCodebook(MD5Hasher()))  # no serialised form: codebook_streams packs it
    assert not streamable(codebook)
    with pytest.raises(DataError, match="CodebookTokenizer cannot key.*codebook_streams.codebook_corpus"):
        pack_rows(codebook, split, 12, "t")


def test_mlm_pretraining_through_the_stream(tiny_project, cache, monkeypatch):  # noqa: F811
    from leanlm import paths
    from leanlm.config import load_config
    from leanlm.data.tokenizer import load_tokenizer
    from leanlm.stages import pretrain as pretrain_module

    config = load_config("params/smoke.yaml")
    record = pretrain_module.pretrain(config, "ch2_hashformers-bert_mlm")
    assert record["objective"] == "mlm" and record["summary"]["steps"] == 4
    assert np.isfinite(record["validation"]["mlm_loss"])
    tok = load_tokenizer("smoke")
    corpus = paths.data_dir("smoke") / "corpus"
    for split, count in (("train", "train_sequences"), ("validation", "validation_sequences")):
        docs = tokenize_documents(tok, read_documents(corpus / f"{split}.jsonl"), "t")
        expected = pack_sequences(docs, 16, tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"))
        assert record["data"][count] == len(expected) > 0
    assert len(list(cache.glob("*.sep.uint16"))) == 2 and record["data"]["packing"] == "cls_sep"
