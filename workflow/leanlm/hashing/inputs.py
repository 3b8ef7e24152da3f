"""How a run's text becomes model inputs when its word embedding reads hashes (ch. 2).

A run's ``tokenizer`` (params/experiments/ch2.yaml) says how text is cut:

- ``profile``: the profile's subword tokenizer, vocabulary ids, no features (BERT-MLM, BERT-S+R,
  BERT-Hash);
- ``hash``: HashFormers' word tokenisation with an unlimited vocabulary (leanlm.hashing.words);
- ``hash_subword``: the pieces of the run's subword tokenizer, hashed as strings (Table 2.6; EELBERT):
  its named tokenizer when it has one (``pretrain_data.tokenizer``: RoBERTa's BPE in the paper profile,
  "hashing BPE pieces", Appendix 2.11), else the profile's; the vocabulary is fixed, so the codebook has
  one row per piece (:class:`PieceCodebookTokenizer`).

For the two hash routes the ids a model sees are rows of a :class:`~leanlm.hashing.HashCodebook`
(distinct token -> row, hashed once when first seen; rows 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]),
and every batch carries the features the embedding declares (``hash_bits``, ``hash_buckets``,
``char_ngram_hashes``), gathered from the codebook by tensor indexing: no per-token Python in the
training loop, and no vocabulary lookup table anywhere.

:class:`CodebookTokenizer` gives the codebook the few ``tokenizers.Tokenizer`` methods the pipeline
calls (``encode_batch`` of texts or pairs with truncation, ``token_to_id``, ``get_vocab_size``), so
packing, the objectives' batches and the GLUE encoder run unchanged on it. Pretraining fits the
codebook (LSH: its top-50K character n-grams over the pretraining corpus) and saves its hasher in
``models/<profile>/<run_id>/codebook/``; fine-tuning loads it, so a task's words hash exactly as
they did in pretraining (rows are not saved: hashing is deterministic, and row ids mean nothing to a
hash embedding beyond the special rows).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.hashing.codebook import HashCodebook
from leanlm.hashing.official_replacements import OfficialRandomBuckets, OfficialRandomInputs, official_random_inputs
from leanlm.hashing.words import SPECIAL_TOKENS, word_tokenize
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hash_features import codebook_settings, embedding_features
from leanlm.training.encoding import Encoding, assemble
from leanlm.runs import HASH_TOKENIZERS, check_run_tokenizer
from leanlm.training.run_tokenizer import subword_tokenizer

CODEBOOK_DIR = "codebook"

Features = Callable[[torch.Tensor], dict]



class CodebookTokenizer:
    """A HashCodebook behind the subset of the ``tokenizers.Tokenizer`` API the pipeline uses.

    ``encode_batch`` takes texts or ``(text_a, text_b)`` pairs and returns ``[CLS] a [SEP] (b [SEP])``
    with type ids 0/1, truncated (when ``enable_truncation`` set a length) longest-first as
    ``tokenizers`` does: the shorter side keeps up to half the budget, the longer the rest.
    """

    def __init__(self, codebook: HashCodebook):
        self.codebook = codebook
        self.max_length: int | None = None

    # -- tokenizers.Tokenizer methods the pipeline calls ----------------------------------------
    def enable_truncation(self, max_length: int, **_: object) -> None:
        self.max_length = int(max_length)

    def no_truncation(self) -> None:
        self.max_length = None

    def no_padding(self) -> None:  # encodings are never padded here; collate pads per batch
        pass

    def token_to_id(self, token: str) -> int | None:
        return self.codebook.index.get(token)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """Rows so far: the tokens met up to now (the vocabulary is unlimited and grows)."""
        return len(self.codebook)

    def encode(self, sequence: str, pair: str | None = None, add_special_tokens: bool = True) -> Encoding:
        return self.encode_batch([sequence if pair is None else (sequence, pair)], add_special_tokens)[0]

    def encode_batch(self, inputs: Sequence, add_special_tokens: bool = True) -> list[Encoding]:
        if not inputs:
            return []
        a_ids = self.codebook.encode([x if isinstance(x, str) else x[0] for x in inputs])
        paired = [i for i, x in enumerate(inputs) if not isinstance(x, str)]
        b_ids = [None] * len(inputs)
        for i, ids in zip(paired, self.codebook.encode([inputs[i][1] for i in paired])):
            b_ids[i] = ids
        return [self._assemble(a, b, add_special_tokens) for a, b in zip(a_ids, b_ids)]

    def _assemble(self, a: list[int], b: list[int] | None, special: bool) -> Encoding:
        index = self.codebook.index
        return assemble(a, b, index["[CLS]"], index["[SEP]"], self.max_length, special)


# ---------------------------------------------------------------------------------------- codebooks
def _model_config(run) -> ModelConfig:
    return ModelConfig.from_dict({**run.model, "vocab_size": 1}, where=f"run {run.run_id}")


class PieceCodebookTokenizer(CodebookTokenizer):
    """Hashing a subword tokenizer's pieces (``hash_subword``: Table 2.6, EELBERT).

    The vocabulary is fixed, so the codebook holds one row per piece, added in id order once; the
    subword tokenizer encodes (at its own speed, with its own truncation) and its ids are mapped to
    rows by one array gather (``to_row``: the identity for the packaged tokenizer, whose special
    tokens are ids 0..4 like the codebook's; a permutation for BERT's hub tokenizer, [CLS] = 101).
    The pieces' special tokens map by role to the codebook's special rows (RoBERTa's <s> to [CLS]'s row),
    which hash embeddings embed from their own table and the objectives never corrupt.
    """

    def __init__(self, pieces, codebook: HashCodebook):
        from leanlm.data.tokenizer import SPECIAL_ROLES, special_token_id

        super().__init__(codebook)
        self.pieces = pieces
        vocab = pieces.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab, key=vocab.get)
        row_names = {special_token_id(pieces, role): name for role, name in zip(SPECIAL_ROLES, SPECIAL_TOKENS)}
        by_id = [row_names.get(vocab[t], t) for t in by_id]  # identical for BERT-named specials
        codebook.add(by_id)
        self.to_row = np.array([codebook.index[t] for t in by_id], dtype=np.int64)

    def enable_truncation(self, max_length: int, **_: object) -> None:
        self.pieces.enable_truncation(max_length=max_length)

    def no_truncation(self) -> None:
        self.pieces.no_truncation()

    def no_padding(self) -> None:
        self.pieces.no_padding()

    def encode_batch(self, inputs: Sequence, add_special_tokens: bool = True) -> list[Encoding]:
        encodings = self.pieces.encode_batch(list(inputs), add_special_tokens=add_special_tokens)
        return [Encoding(self.to_row[np.asarray(e.ids, dtype=np.int64)].tolist(), list(e.type_ids))
                for e in encodings]


def corpus_token_counts(texts: Sequence[str], pieces=None) -> Counter:
    """Frequency of every word (or, with ``pieces``, every subword piece) in ``texts``."""
    if pieces is None:
        counts: Counter = Counter()
        for text in texts:
            counts.update(word_tokenize(text))
        return counts
    size = pieces.get_vocab_size(with_added_tokens=True)
    totals = np.zeros(size, dtype=np.int64)
    for start in range(0, len(texts), 2048):
        batch = pieces.encode_batch(list(texts[start:start + 2048]), add_special_tokens=False)
        ids = np.fromiter((i for e in batch for i in e.ids), dtype=np.int64)
        totals += np.bincount(ids, minlength=size)
    return Counter({pieces.id_to_token(int(i)): int(totals[i]) for i in np.flatnonzero(totals)})


def _tokenizer_for(run, codebook: HashCodebook, config: dict, pieces=None) -> CodebookTokenizer:
    if run.tokenizer == "hash_subword":
        return PieceCodebookTokenizer(pieces if pieces is not None else subword_tokenizer(config, run), codebook)
    return CodebookTokenizer(codebook)


def fit_codebook(config: dict, run, train_path: str | Path, pieces=None) -> HashCodebook:
    """The (row-less) codebook of a hash run, fitted on the split ``train_path``: LSH's top-50K character
    n-grams of the words or pieces there, weighted by frequency, counted ``ENCODE_CHUNK`` documents at a
    time (the split never sits in memory); MD5 needs nothing but its key."""
    from leanlm.training.eos_packing import _text_chunks

    model_config = _model_config(run)
    check_run_tokenizer(run, model_config)
    settings = codebook_settings(model_config)
    counts = None
    if settings["hash"] == "lsh":
        if run.tokenizer == "hash_subword" and pieces is None:
            pieces = subword_tokenizer(config, run)
        counts = Counter()
        for texts in _text_chunks(Path(train_path)):
            counts.update(corpus_token_counts(texts, pieces if run.tokenizer == "hash_subword" else None))
    return HashCodebook.for_model(model_config, token_counts=counts)


def pretraining_tokenizer(config: dict, run):
    """The tokenizer of a hash run that trains no model on packed text (ProFormer's ``none``): a fresh
    :class:`CodebookTokenizer` fitted on the training split (packed hash runs take theirs, with its rows,
    from :func:`leanlm.hashing.codebook_streams.codebook_corpus`)."""
    from leanlm.data.pretrain_data import run_data

    train = run_data(config, run).corpus_dir / "train.jsonl"
    if not train.is_file():
        raise DataError(f"corpus split {train} is missing; run the data stage first (`snakemake data` or `dvc repro`)")
    return _tokenizer_for(run, fit_codebook(config, run, train), config)


def save_inputs(tokenizer, directory: str | Path) -> None:
    """Save a CodebookTokenizer's hasher (no rows) beside the model; nothing for other tokenizers."""
    if isinstance(tokenizer, CodebookTokenizer):
        book = tokenizer.codebook
        HashCodebook(book.hasher, book.n_buckets).save(Path(directory) / CODEBOOK_DIR)


def finetuning_tokenizer(config: dict, run):
    """The tokenizer a hash run's fine-tuning encodes task text with: the pretrained run's saved codebook
    (over the pieces its pretraining saved, for hash_subword runs with a named tokenizer)."""
    from leanlm.training.run_tokenizer import saved_run_tokenizer

    directory = paths.models_dir(config["profile"]) / (run.evaluate_from or run.run_id) / CODEBOOK_DIR
    if not (directory / "codebook.json").is_file():
        raise DataError(f"{directory} is missing: run {run.run_id} hashes its tokens with the codebook "
                        f"its pretraining saves; re-run `leanlm pretrain --run {run.run_id}`")
    return _tokenizer_for(run, HashCodebook.load(directory), config, pieces=saved_run_tokenizer(config, run.run_id))


# ----------------------------------------------------------------------------------------- features
def feature_hook(model_config, tokenizer) -> Features | None:
    """``ids -> {feature: tensor}`` for a model whose embedding reads hash features, else None."""
    if not isinstance(model_config, ModelConfig):
        return None  # a hub model (CANINE-C) reads nothing but its ids
    names = embedding_features(model_config)
    if not names:
        return None
    if not isinstance(tokenizer, CodebookTokenizer):
        raise ConfigError(f"embedding {model_config.embedding!r} reads {list(names)}, which only a "
                          f"codebook tokenizer ({' or '.join(HASH_TOKENIZERS)}) makes")
    codebook, options = tokenizer.codebook, dict(model_config.embedding_options)
    return lambda ids: codebook.features(ids, names, options)


class FeatureBatches:
    """An objective's batches with the hash features of their (corrupted) ids added.

    ``random_inputs`` (:func:`leanlm.hashing.official_replacements.official_random_inputs`), for a HashFormer
    under Shuffle+Random's ``corruption: official_code``: the randomly replaced tokens' inputs then become
    the official collators' (random bits; for Emb a uniform id of its vocabulary), drawn from the batch's
    generator after its other draws.
    Delegates everything else (``batch_size``, the settings) to the wrapped batches.
    """

    def __init__(self, inner, features: Features,
                 random_inputs: OfficialRandomInputs | OfficialRandomBuckets | None = None):
        self.inner, self.features, self.random_inputs = inner, features, random_inputs

    def _add(self, batch: dict) -> dict:
        batch.update(self.features(batch["input_ids"]))
        return batch

    def __call__(self, step: int, micro: int) -> dict:
        if self.random_inputs is None:
            return self._add(self.inner(step, micro))
        return self.masked(*self.inner.rows_at(step, micro))  # the rows and their generator

    def masked(self, rows: torch.Tensor, generator) -> dict:
        batch = self._add(self.inner.masked(rows, generator))
        return batch if self.random_inputs is None else self.random_inputs(rows, batch, generator)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def with_features(batches, model_config: ModelConfig, tokenizer):
    """``batches`` unchanged for models that read only ids, else wrapped in :class:`FeatureBatches`; with
    the official collators' random inputs where the batches corrupt as the official code does
    (``corruption`` of :class:`leanlm.objectives.shuffle_random.ShuffleRandomBatches`)."""
    hook = feature_hook(model_config, tokenizer)
    if hook is None:
        return batches
    official = getattr(batches, "corruption", None) == "official_code"
    return FeatureBatches(batches, hook, official_random_inputs(model_config) if official else None)
