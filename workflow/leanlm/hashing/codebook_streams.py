"""Chapter 2's hash-codebook corpora as memory-mapped row-id streams, so no corpus sits in memory.

A hash run (``tokenizer: hash`` or ``hash_subword``, :mod:`leanlm.hashing.inputs`) feeds its model
codebook rows: distinct token -> row (first-seen order, rows 0..4 the special tokens), each row's hash bits
and buckets computed once. Packing used to hold the whole training split in memory three times over (texts,
per-document id lists, the packed int64 tensor: ~131 bytes a token, ~500 GB at the paper's 4B tokens). Now
the corpus is read twice from disk, ``ENCODE_CHUNK`` documents at a time, into two cached layers:

1. **Row streams** (one per tokenisation route and corpus, shared by every hash run that cuts text the same
   way): ``d1 SEP d2 ...`` of row ids for the train and validation splits, memory-mapped, as chs. 2-3's
   subword streams are (:func:`leanlm.training.eos_packing.token_stream`). Words (``hash``): rows in
   first-seen order over train then validation, exactly as :class:`~leanlm.hashing.HashCodebook.encode`
   numbers them, written as uint32 with the row names (``tokens.jsonl``); the rows do not depend on the
   hasher, so MD5 and LSH runs share them. Pieces (``hash_subword``): the subword tokenizer's own cached
   ``.sep`` stream, mapped to rows by one gather as rows are read (``StreamRows(lookup=to_row)``).
2. **The fitted codebook** (one per codebook recipe): the hasher (LSH fits its n-grams on the train split's
   token counts, counted chunk by chunk) with every row hashed, saved as a :class:`HashCodebook` with its
   rows. Keyed by the recipe (hash kind, bits, buckets, route, the row streams' key, the hashing code),
   since the fitted hasher cannot be known before the counting pass; its :meth:`HashCodebook.fingerprint`
   (hasher state, n-gram vocabulary and seed included) is recorded and checked when it is loaded.

Both layers live under ``<cache>/codebooks/`` (outside ``data/``) and are written atomically and under
:func:`leanlm.scratch.build_once`'s lock, so concurrent jobs build each once. The row streams are rebuilt when a
stream is missing or disagrees with its record (size and SHA-256); the codebook's files are checked against
the SHA-256 digests its ``codebook.json`` records (:meth:`HashCodebook.load`), and one altered is refused by
name, as a codebook that disagrees with its ``fitted.json`` is. Memory then grows with the distinct tokens (the codebook: ~200 bytes
a distinct word in Python, 24 bytes of hashes a row), never with the corpus's tokens; see
docs/benchmarks.md. The rows, ids and features are those of the in-memory packing they replace
(tests/test_codebook_streams.py compares them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leanlm import paths
from leanlm.errors import DataError
from leanlm.hashing.codebook import HashCodebook
from leanlm.hashing.words import SPECIAL_TOKENS, word_tokenize
from leanlm.io import read_jsonl, write_json, write_jsonl
from leanlm.scratch import build_once
from leanlm.modeling.hash_features import codebook_settings
from leanlm.training import eos_packing
from leanlm.training.eos_packing import StreamRows, token_stream
from leanlm.hashing.inputs import (Encoding, PieceCodebookTokenizer, _model_config, _tokenizer_for,
                                   check_run_tokenizer, fit_codebook)
from leanlm.training.run_tokenizer import subword_tokenizer
from leanlm.training.token_cache import cache_key, split_digest

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SPLITS = ("train", "validation")  # in this order: validation's new words get rows after train's
WORD_DTYPE = np.dtype(np.uint32)  # rows are unknown until the corpus is read; 4 bytes hold 4 billion


def _code_digest() -> str:
    """SHA-256 of the code that decides rows and hashes (the hashing package, the codebook tokenizers and
    this module): a changed hash or tokenisation never serves a stale cache."""
    import leanlm.hashing
    from leanlm.hashing import inputs as hash_inputs

    digest = hashlib.sha256()
    for path in sorted(Path(leanlm.hashing.__file__).parent.glob("*.py")) + [Path(hash_inputs.__file__),
                                                                             Path(__file__)]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def _split_paths(corpus_dir: Path) -> dict[str, Path]:
    out = {split: Path(corpus_dir) / f"{split}.jsonl" for split in SPLITS}
    for path in out.values():
        if not path.is_file():
            raise DataError(f"corpus split {path} is missing; run the data stage first (`snakemake data` or `dvc repro`)")
    return out


# ---------------------------------------------------------------------------- layer 1: word rows
class WordRows:
    """Rows of distinct words in first-seen order, numbered as :meth:`HashCodebook.encode` numbers them
    (special tokens 0..4, then every new word), without hashing: the few ``tokenizers`` methods
    :func:`leanlm.training.eos_packing._write_stream` calls."""

    def __init__(self):
        self.tokens: list[str] = list(SPECIAL_TOKENS)
        self.index: dict[str, int] = {t: i for i, t in enumerate(self.tokens)}

    def no_truncation(self) -> None:
        pass

    def no_padding(self) -> None:
        pass

    def encode_batch(self, texts, add_special_tokens: bool = False) -> list[Encoding]:
        tokens, index, out = self.tokens, self.index, []
        for text in texts:
            ids = []
            for word in word_tokenize(text):
                row = index.get(word)
                if row is None:
                    row = index[word] = len(tokens)
                    tokens.append(word)
                ids.append(row)
            out.append(Encoding(ids))
        return out


def _stream_size_ok(path: Path, tokens: int, dtype: np.dtype) -> bool:
    return path.is_file() and path.stat().st_size == tokens * dtype.itemsize


class WordStreams:
    """Layer 1 for ``tokenizer: hash``: ``<cache>/codebooks/words-<key>/`` holding ``<split>.sep.uint32``,
    ``tokens.jsonl`` (row names) and ``streams.json`` (tokens per split, rows)."""

    def __init__(self, corpus_dir: Path):
        self.splits = _split_paths(corpus_dir)
        self.key = _key("word-rows", FORMAT_VERSION, _code_digest(),
                        {s: split_digest(p) for s, p in self.splits.items()})
        self.directory = paths.cache_dir() / "codebooks" / f"words-{self.key}"
        self.record_path = self.directory / "streams.json"

    def _record(self) -> dict | None:
        try:
            record = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        try:
            # Size and SHA-256 of each stream: bytes overwritten at the right size are caught (issue 16).
            ok = (record.get("format") == FORMAT_VERSION and (self.directory / "tokens.jsonl").is_file()
                  and all(_stream_size_ok(self.directory / f"{s}.sep.uint32", int(record["tokens"][s]), WORD_DTYPE)
                          and eos_packing.bytes_match(self.directory / f"{s}.sep.uint32", str(record["sha256"][s]))
                          for s in SPLITS))
        except (KeyError, TypeError, ValueError):
            ok = False
        return record if ok else None

    def build(self) -> None:
        rows = WordRows()
        tokens, sha256 = {}, {}
        for split, path in self.splits.items():
            target = self.directory / f"{split}.sep.uint32"
            tokens[split], sha256[split] = eos_packing._write_stream(rows, path, SPECIAL_TOKENS.index("[SEP]"), WORD_DTYPE,
                                                      target, f"word rows of {path.name}", leading=False)
        write_jsonl(self.directory / "tokens.jsonl", ({"t": t} for t in rows.tokens))
        write_json(self.record_path, {"format": FORMAT_VERSION, "tokens": tokens, "sha256": sha256, "rows": len(rows.tokens),
                                      "splits": {s: str(p) for s, p in self.splits.items()}})
        log.info("word rows: %d distinct tokens, %s tokens per split, in %s", len(rows.tokens), tokens, self.directory)

    def ensure(self) -> dict:
        if not build_once(self.record_path, self.build, f"the word-row streams of {self.splits['train'].parent}",
                          done=lambda: self._record() is not None):
            log.info("word-row streams from the cache %s", self.directory)
        record = self._record()
        if record is None:
            raise DataError(f"{self.directory}: the word-row streams disagree with {self.record_path.name} "
                            f"right after being built; remove the directory and run again")
        return record

    def stream(self, split: str, tokens: int) -> np.ndarray:
        if tokens == 0:
            return np.zeros(0, dtype=WORD_DTYPE)
        return np.memmap(self.directory / f"{split}.sep.uint32", dtype=WORD_DTYPE, mode="r", shape=(tokens,))

    def tokens(self) -> list[str]:
        return [row["t"] for row in read_jsonl(self.directory / "tokens.jsonl")]


# ------------------------------------------------------------------------- layer 2: the codebook
class FittedCodebook:
    """Layer 2: ``<cache>/codebooks/codebook-<key>/`` holding the saved codebook with all its rows and
    ``fitted.json`` (its fingerprint and rows)."""

    def __init__(self, run, rows_key: str, pieces=None):
        self.run, self.pieces = run, pieces
        settings = codebook_settings(_model_config(run))
        self.key = _key("codebook", FORMAT_VERSION, run.tokenizer, settings, rows_key, _code_digest())
        self.directory = paths.cache_dir() / "codebooks" / f"codebook-{self.key}"
        self.record_path = self.directory / "fitted.json"

    def _record(self) -> dict | None:
        try:
            record = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if (self.directory / "codebook" / "codebook.json").is_file() else None

    def ensure(self, build) -> HashCodebook:
        def make() -> None:
            book = build()
            book.save(self.directory / "codebook")
            write_json(self.record_path, {"format": FORMAT_VERSION, "fingerprint": book.fingerprint(),
                                          "rows": len(book), "run": self.run.run_id})
            log.info("codebook %s: %d rows hashed into %s", book.fingerprint()[:12], len(book), self.directory)

        if not build_once(self.record_path, make, f"the codebook of run {self.run.run_id}", done=lambda: self._record() is not None):
            log.info("codebook from the cache %s", self.directory)
        book = HashCodebook.load(self.directory / "codebook")
        record = self._record() or {}
        if book.fingerprint() != record.get("fingerprint") or len(book) != record.get("rows"):
            raise DataError(f"{self.directory}: the saved codebook disagrees with {self.record_path.name} "
                            f"(fingerprint or rows); remove the directory and run again")
        return book


# ------------------------------------------------------------------------------------ the corpus
@dataclass
class CodebookCorpus:
    """A hash run's pretraining inputs: its codebook tokenizer and the packed train/validation rows."""

    tokenizer: object
    train: StreamRows
    validation: StreamRows


def _rows(stream: np.ndarray, seq_len: int, tokenizer, path: Path, lookup=None) -> StreamRows:
    wrap = (tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))
    rows = StreamRows(stream, seq_len, wrap, lookup=lookup)
    if len(rows) == 0:
        raise DataError(f"{path}: no full sequence of {seq_len} tokens could be packed; the corpus is too small")
    return rows


def codebook_corpus(config: dict, run, corpus_dir: str | Path, seq_len: int) -> CodebookCorpus:
    """Build (once, cached) or load a hash run's codebook and row streams and pack them into
    ``[CLS] body [SEP]`` rows of ``seq_len``: the rows, ids and codebook of the in-memory packing."""
    eos_packing._check_seq_len(seq_len, wrapped=True)  # before reading the corpus, not after
    check_run_tokenizer(run, _model_config(run))
    splits = _split_paths(Path(corpus_dir))
    if run.tokenizer == "hash_subword":
        pieces = subword_tokenizer(config, run)
        sep = _piece_sep(pieces)
        streams = {s: token_stream(pieces, p, sep, f"tokenize {s}", packing="sep") for s, p in splits.items()}
        rows_key = _key([cache_key(pieces, p) for p in splits.values()])
        book = FittedCodebook(run, rows_key, pieces).ensure(
            lambda: PieceCodebookTokenizer(pieces, fit_codebook(config, run, splits["train"], pieces)).codebook)
        tokenizer = _tokenizer_for(run, book, config, pieces=pieces)  # (its rows are the saved ones: adds none)
        return CodebookCorpus(tokenizer, *(_rows(streams[s], seq_len, tokenizer, splits[s], lookup=tokenizer.to_row)
                                           for s in SPLITS))
    words = WordStreams(Path(corpus_dir))
    record = words.ensure()

    def build() -> HashCodebook:
        book = fit_codebook(config, run, splits["train"])
        names = words.tokens()
        for start in range(len(SPECIAL_TOKENS), len(names), 1 << 16):  # hashed in blocks: bounded scratch
            book.add(names[start:start + (1 << 16)])
        if len(book) != record["rows"]:
            raise DataError(f"{words.directory}: tokens.jsonl lists {len(book)} distinct rows, the record {record['rows']}")
        return book

    book = FittedCodebook(run, words.key).ensure(build)
    if len(book) != record["rows"]:
        raise DataError(f"codebook of run {run.run_id} has {len(book)} rows, its word streams {record['rows']}; "
                        f"remove {paths.cache_dir() / 'codebooks'} and run again")
    tokenizer = _tokenizer_for(run, book, config)
    return CodebookCorpus(tokenizer, *(_rows(words.stream(s, int(record["tokens"][s])), seq_len, tokenizer, splits[s])
                                       for s in SPLITS))


def _piece_sep(pieces) -> int:
    from leanlm.data.tokenizer import special_token_id

    sep = special_token_id(pieces, "sep")
    if sep is None:
        raise DataError("hash_subword needs a subword tokenizer with a separator token ([SEP] or </s>)")
    return sep
