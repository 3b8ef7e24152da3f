"""``HashCodebook``: distinct token -> row id, with each row's hash precomputed (the data path).

HashFormers support an unlimited vocabulary, so there is no fixed token list: the codebook grows a
row the first time it meets a token and hashes it then, once. Batches carry row ids
(``input_ids``), and the per-token hash inputs are gathered from the rows by tensor indexing:

    codebook = HashCodebook(MD5Hasher(), n_buckets=1037)
    ids = codebook.encode(["The cat sat."], max_len=64)        # list[list[int]]
    batch = torch.tensor(ids)
    codebook.bits(batch)        # FloatTensor [..., T] in {0, 1}  -> feature "hash_bits"
    codebook.buckets(batch)     # LongTensor  [...]               -> feature "hash_buckets"

Rows 0..4 are the special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]; their bits and buckets are 0;
the models embed them from a small table of their own). Bits are stored packed (16 bytes per row for
T = 128), so a 12M-token codebook holds 190 MB of bits, not 6 GB of floats.

A codebook is saved to a directory (``codebook.json`` with the hasher state and, for the BPE route of
Appendix 2.11, the tokenizer; ``tokens.jsonl``; ``bits.npy``; ``buckets.npy``) and loads back to the
same rows and hashes. ``codebook.json`` is written last and records the SHA-256 of the other three files
as written; loading checks them, so bits altered on disk but still a valid array are refused by name
instead of training on wrong hashes (as checkpoints and token streams are checked).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from leanlm.errors import ConfigError, DataError
from leanlm.hashing.lsh import LSHHasher
from leanlm.hashing.md5 import MD5Hasher
from leanlm.hashing.ngrams import ngram_rolling_hashes
from leanlm.hashing.words import SPECIAL_TOKENS, piece_tokenizer, word_tokenize
from leanlm.io import atomic_path, read_jsonl, sha256_file, write_json

FORMAT = "leanlm-hash-codebook"
FORMAT_VERSION = 2  # 2: codebook.json records the SHA-256 of DATA_FILES (1 recorded none)
DATA_FILES = ("bits.npy", "buckets.npy", "tokens.jsonl")
HASHERS = {"md5": MD5Hasher, "lsh": LSHHasher}
_SHIFTS = torch.arange(7, -1, -1, dtype=torch.uint8)  # unpack bytes most significant bit first


class HashCodebook:
    """Token rows with precomputed hash bits (and buckets when ``n_buckets`` is set).

    ``tokenizer``: None hashes words (:func:`word_tokenize`); a ``tokenizers.Tokenizer`` hashes its
    BPE/WordPiece pieces instead (Appendix 2.11).
    """

    def __init__(self, hasher, n_buckets: int | None = None, tokenizer=None):
        if n_buckets is not None and (not isinstance(n_buckets, int) or n_buckets < 1):
            raise ConfigError(f"codebook buckets={n_buckets!r} must be a positive integer or None")
        self.hasher, self.n_buckets, self.tokenizer = hasher, n_buckets, tokenizer
        self.tokenize = word_tokenize if tokenizer is None else piece_tokenizer(tokenizer)
        self.n_bytes = (hasher.n_bits + 7) // 8
        self.tokens: list[str] = []
        self.index: dict[str, int] = {}
        # Row arrays with spare capacity (doubled when full), so growing by a batch is amortised O(1).
        self._packed_store = np.zeros((64, self.n_bytes), dtype=np.uint8)
        self._buckets_store = np.zeros(64, dtype=np.int64)
        self._ngram_cache: dict[tuple[int, int], np.ndarray] = {}
        self._append(list(SPECIAL_TOKENS), hashed=False)

    @classmethod
    def for_model(cls, config, token_counts: Mapping[str, int] | None = None, tokenizer=None,
                  key: bytes = b"en", seed: int = 0) -> "HashCodebook":
        """The codebook a model's embedding needs (leanlm.modeling.hash_features.codebook_settings).

        LSH fits its n-gram vocabulary on ``token_counts`` (token -> corpus frequency: the words, or
        the BPE pieces with ``tokenizer``); MD5 uses ``key``.
        """
        from leanlm.modeling.hash_features import codebook_settings

        settings = codebook_settings(config)
        if settings is None:
            raise ConfigError(f"embedding {config.embedding!r} reads vocabulary ids, not hashes: it "
                              f"needs no codebook")
        if settings["hash"] == "lsh":
            if not token_counts:
                raise DataError("an LSH codebook needs the corpus's token counts to fit its n-grams")
            hasher = LSHHasher.fit(token_counts, n_bits=settings["n_bits"], seed=seed)
        else:
            hasher = MD5Hasher(key=key, n_bits=settings["n_bits"])
        return cls(hasher, settings["n_buckets"], tokenizer)

    # -- rows -------------------------------------------------------------------------------------
    @property
    def n_bits(self) -> int:
        return self.hasher.n_bits

    @property
    def n_special(self) -> int:
        return len(SPECIAL_TOKENS)

    def __len__(self) -> int:
        return len(self.tokens)

    def token_id(self, token: str) -> int:
        return self.index[token]

    def add(self, tokens: Iterable[str]) -> None:
        """Give every unseen token a row (in first-seen order, so ids never depend on hash seeds)."""
        fresh = [t for t in dict.fromkeys(tokens) if t not in self.index]
        if fresh:
            self._append(fresh, hashed=True)

    def _append(self, tokens: list[str], hashed: bool) -> None:
        # Hash first: if hashing fails, the codebook is left as it was.
        if hashed:
            bits, buckets = self.hasher.bits_and_buckets(tokens, self.n_buckets)
            packed = np.packbits(bits, axis=1, bitorder="big")
            if buckets is None:
                buckets = np.zeros(len(tokens), dtype=np.int64)
        else:
            packed = np.zeros((len(tokens), self.n_bytes), dtype=np.uint8)
            buckets = np.zeros(len(tokens), dtype=np.int64)
        start, end = len(self.tokens), len(self.tokens) + len(tokens)
        if end > len(self._packed_store):
            capacity = max(end, 2 * len(self._packed_store))
            self._packed_store = _grown(self._packed_store, capacity)
            self._buckets_store = _grown(self._buckets_store, capacity)
        self._packed_store[start:end] = packed
        self._buckets_store[start:end] = buckets
        self.tokens += tokens
        self.index.update((t, start + i) for i, t in enumerate(tokens))

    @property
    def _packed(self) -> np.ndarray:
        return self._packed_store[: len(self.tokens)]

    @property
    def _buckets(self) -> np.ndarray:
        return self._buckets_store[: len(self.tokens)]

    # -- encoding ---------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], max_len: int | None = None,
               add_special_tokens: bool = False) -> list[list[int]]:
        """Row ids of each text's tokens (new tokens get rows), cut to ``max_len`` ids.

        ``add_special_tokens`` wraps each text as ``[CLS] ... [SEP]`` within ``max_len``.
        """
        if isinstance(texts, str):
            raise TypeError("encode takes a list of texts; wrap a single text in a list")
        if self.tokenizer is not None:
            pieces = [e.tokens for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        else:
            pieces = [word_tokenize(t) for t in texts]
        body = None if max_len is None else max_len - 2 * add_special_tokens
        if body is not None and body < 0:
            raise ConfigError(f"max_len={max_len} leaves no room for [CLS] and [SEP]")
        pieces = [p[:body] for p in pieces]
        self.add(t for p in pieces for t in p)
        index = self.index
        ids = [[index[t] for t in p] for p in pieces]
        if add_special_tokens:
            cls_id, sep_id = index["[CLS]"], index["[SEP]"]
            ids = [[cls_id, *row, sep_id] for row in ids]
        return ids

    # -- features (gathered by tensor indexing) ----------------------------------------------------
    def _check(self, ids: torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32):
            raise DataError(f"codebook ids must be an integer tensor, got {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= len(self)):
            raise DataError(f"codebook ids must lie in [0, {len(self)}); got "
                            f"[{int(ids.min())}, {int(ids.max())}]: were they encoded by another codebook?")
        return ids.long()

    def bits(self, ids: torch.Tensor) -> torch.Tensor:
        """FloatTensor ``[*ids.shape, T]`` of each row's hash bits in {0, 1}, most significant first."""
        ids = self._check(ids)
        packed = torch.from_numpy(self._packed)[ids.cpu()]  # [..., n_bytes] uint8
        unpacked = (packed.unsqueeze(-1) >> _SHIFTS) & 1  # [..., n_bytes, 8]
        bits = unpacked.flatten(-2)[..., : self.n_bits]
        return bits.to(device=ids.device, dtype=torch.float32)

    def buckets(self, ids: torch.Tensor) -> torch.Tensor:
        """LongTensor ``ids.shape`` of each row's bucket in [0, N) (Emb's embedding index)."""
        if not self.n_buckets:
            raise ConfigError("this codebook was built without buckets; build it with n_buckets=N "
                              "(the Emb variant's embedding_options['buckets'])")
        ids = self._check(ids)
        return torch.from_numpy(self._buckets)[ids.cpu()].to(ids.device)

    def char_ngram_hashes(self, ids: torch.Tensor, n_max: int = 3, max_chars: int = 16) -> torch.Tensor:
        """LongTensor ``[*ids.shape, n_max, max_chars]``: rolling hashes of each row's character
        n-grams (EELBERT), -1 where there is none; special rows have none. Cached per row."""
        ids = self._check(ids)
        key = (n_max, max_chars)
        table = self._ngram_cache.get(key, np.full((0, n_max, max_chars), -1, dtype=np.int64))
        if len(table) < len(self):
            tokens = self.tokens[len(table):]
            fresh = ngram_rolling_hashes(tokens, n_max, max_chars)
            fresh[: max(0, self.n_special - len(table))] = -1  # special rows have no characters
            table = np.concatenate([table, fresh])
            self._ngram_cache[key] = table
        return torch.from_numpy(table)[ids.cpu()].to(ids.device)

    def features(self, ids: torch.Tensor, names: Iterable[str],
                 options: Mapping | None = None) -> dict[str, torch.Tensor]:
        """The named batch features for ``ids`` (what an embedding's ``features`` lists).

        ``options`` are the model's ``embedding_options`` (EELBERT reads ``ngram`` and ``max_chars``).
        """
        options = options or {}
        makers = {
            "hash_bits": lambda: self.bits(ids),
            "hash_buckets": lambda: self.buckets(ids),
            "char_ngram_hashes": lambda: self.char_ngram_hashes(
                ids, options.get("ngram", 3), options.get("max_chars", 16)),
        }
        out = {}
        for name in names:
            if name not in makers:
                raise ConfigError(f"the codebook cannot produce feature {name!r}; it makes {sorted(makers)}")
            out[name] = makers[name]()
        return out

    def random_ids(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """Uniform non-special rows (Shuffle+Random's replacement tokens, for ``vocab_or_sampler``)."""
        if len(self) <= self.n_special:
            raise DataError("the codebook holds no token yet; encode the corpus first")
        return torch.randint(self.n_special, len(self), shape, generator=generator)

    def fingerprint(self) -> str:
        """SHA-256 of what decides every row's hashes: the hasher's state (MD5's key and bits; LSH's
        n-gram vocabulary, bits and seed, hence its hyperplanes), the buckets and the piece tokenizer.
        Equal fingerprints hash every token alike; rows are not part of it (they are the corpus's)."""
        state = {"hasher": self.hasher.to_dict(), "n_buckets": self.n_buckets,
                 "tokenizer": None if self.tokenizer is None else self.tokenizer.to_str()}
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode("utf-8")).hexdigest()

    # -- persistence ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the rows' files, then ``codebook.json`` with their SHA-256 digests (so a directory with a
        codebook.json has complete files, and :meth:`load` can tell when one changed)."""
        directory = Path(directory)
        digests = {
            "bits.npy": _written(directory / "bits.npy", lambda tmp: np.save(tmp, self._packed)),
            "buckets.npy": _written(directory / "buckets.npy", lambda tmp: np.save(tmp, self._buckets)),
            "tokens.jsonl": _written(directory / "tokens.jsonl", lambda tmp: tmp.write_text(
                "".join(json.dumps({"t": t}, ensure_ascii=False) + "\n" for t in self.tokens), encoding="utf-8")),
        }
        write_json(directory / "codebook.json", {
            "format": FORMAT, "format_version": FORMAT_VERSION, "rows": len(self),
            "hasher": self.hasher.to_dict(), "n_buckets": self.n_buckets,
            "tokenizer": None if self.tokenizer is None else self.tokenizer.to_str(),
            "sha256": digests,
        })
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "HashCodebook":
        """The codebook saved in ``directory``; :class:`DataError` naming the file when one is missing,
        altered since it was written (its SHA-256) or inconsistent with the others."""
        directory = Path(directory)
        path = directory / "codebook.json"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise DataError(f"{path}: unreadable codebook ({err}); rebuild the codebook") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataError(f"{path} is not a leanlm hash codebook (format "
                            f"{meta.get('format') if isinstance(meta, dict) else None!r})")
        _verify_files(directory, meta)
        kind = meta["hasher"]["kind"]
        if kind not in HASHERS:
            raise DataError(f"{path}: unknown hasher {kind!r}; known: {sorted(HASHERS)}")
        tokenizer = None
        if meta["tokenizer"] is not None:
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_str(meta["tokenizer"])
        book = cls(HASHERS[kind].from_dict(meta["hasher"]), meta["n_buckets"], tokenizer)
        tokens = [row["t"] for row in read_jsonl(directory / "tokens.jsonl")]
        packed, buckets = np.load(directory / "bits.npy"), np.load(directory / "buckets.npy")
        if tokens[: book.n_special] != list(SPECIAL_TOKENS) or not (
                len(tokens) == len(packed) == len(buckets) == meta["rows"]):
            raise DataError(f"{directory}: codebook files disagree (rows {meta['rows']}, tokens "
                            f"{len(tokens)}, bits {len(packed)}, buckets {len(buckets)}); rebuild it")
        book.tokens = tokens
        book.index = {t: i for i, t in enumerate(tokens)}
        book._packed_store, book._buckets_store = packed, buckets
        return book


# What to do about a codebook that cannot be trusted: a cached one (<cache>/codebooks/) is rebuilt once it
# is gone; one beside a model is written by that hash run's pretraining.
_REDO = "and run again (a cached codebook is rebuilt; a model's codebook is written by its pretraining)"


def _written(path: Path, write) -> str:
    """Write ``path`` atomically with ``write(tmp)``; returns the SHA-256 of the bytes written."""
    with atomic_path(path, suffix=path.suffix) as tmp:
        write(tmp)
        return sha256_file(tmp)


def _verify_files(directory: Path, meta: dict) -> None:
    """DataError unless each of DATA_FILES has the SHA-256 ``codebook.json`` recorded for it.

    A codebook of format 1 recorded no digests. It is refused rather than trusted: nothing can tell its
    files from altered ones, and none needs keeping (a cached codebook's key includes this module's code,
    so the cache never reads one again; a model's is rewritten by its pretraining, whose code fingerprint
    includes this module, when the pipeline runs)."""
    path = directory / "codebook.json"
    recorded = meta.get("sha256")
    version = meta.get("format_version", 1)
    if not isinstance(version, int) or version < 2 or not isinstance(recorded, dict):
        raise DataError(f"{path} was written by an older leanlm, which recorded no checksums of the codebook's "
                        f"files, so they cannot be verified: delete {directory} {_REDO}")
    for name in DATA_FILES:
        file = directory / name
        if not file.is_file():
            raise DataError(f"codebook file {file} is missing: delete {directory} {_REDO}")
        if (actual := sha256_file(file)) != recorded.get(name):
            raise DataError(f"codebook file {file} is damaged or was altered: its SHA-256 is {actual}, but "
                            f"{recorded.get(name)} was recorded in {path} when it was written; delete {directory} "
                            f"{_REDO}")


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[: len(array)] = array
    return out
