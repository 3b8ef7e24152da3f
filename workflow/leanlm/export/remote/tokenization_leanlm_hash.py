"""The tokenizer of a ch. 2 hash-embedding export: text -> ``input_ids`` and the features the embedding reads.

Copied verbatim into the export by ``leanlm export-hf`` (``trust_remote_code``); it imports only the standard
library, torch, transformers and transformers' own dependencies (tokenizers, safetensors). It does what
leanlm's hashing route does (leanlm.hashing):

- cut the text into tokens: HashFormers' words (lower-cased runs of word characters and runs of punctuation,
  an unlimited vocabulary), or the pieces of the run's subword tokenizer (``hash_pieces.json``);
- give each token a row (0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]; a word gets the next free row when first
  met, a piece the row of its id); lay a text or a pair out as ``[CLS] a [SEP] (b [SEP])``, cut longest-first;
- hash each token (``hash_codebook.json``, and for LSH the hyperplanes in ``hash_codebook.safetensors``):
  HMAC-MD5 with the run's key (bits: the digest, most significant bit first; bucket: the digest mod N), or
  LSH over its character 1..4-gram counts (bit j: x.r_j >= 0; bucket: the argmax over N cyclic shifts of
  one vector), or EELBERT's rolling hashes of its character 1..n-grams;

and returns ``hash_bits`` / ``hash_buckets`` / ``char_ngram_hashes`` beside ``input_ids``, so
``model(**tokenizer(texts, return_tensors="pt"))`` gives leanlm's logits. A word's row means nothing to the
model beyond being a regular token, so rows may differ from the codebook leanlm trained with.
"""

import hashlib
import hmac
import json
import os
import re
import shutil

import torch
from transformers import BatchEncoding, PreTrainedTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORD_PATTERN = re.compile(r"\w+|[^\w\s]+")
SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
ROLLING_BASE, ROLLING_MODULUS = 31, 10**9 + 7  # EELBERT's polynomial rolling hash


def word_tokenize(text):
    """Lower-cased runs of word characters and of punctuation; special tokens kept as they are."""
    tokens = []
    for part in SPECIAL_SPLIT.split(text):
        if part in SPECIAL_TOKENS:
            tokens.append(part)
        elif part:
            tokens.extend(WORD_PATTERN.findall(part.lower()))
    return tokens


def assemble(a, b, max_length):
    """``[CLS] a [SEP] (b [SEP])`` and its type ids, the longer side cut first to fit ``max_length``
    (the shorter keeps up to half the budget)."""
    if max_length is not None:
        budget = max_length - (2 if b is None else 3)
        if b is None:
            a = a[:budget]
        elif len(a) + len(b) > budget:
            short_a = len(a) <= len(b)
            keep_short = min(len(a) if short_a else len(b), budget // 2)
            a, b = (a[:keep_short], b[:budget - keep_short]) if short_a else (a[:budget - keep_short], b[:keep_short])
    ids, types = [2, *a, 3], [0] * (len(a) + 2)
    if b is not None:
        ids, types = ids + [*b, 3], types + [1] * (len(b) + 1)
    return ids, types


def rolling_hashes(token, n_max, max_chars):
    """``[n_max][max_chars]``: the rolling hash of the n-gram starting at each character, -1 where none."""
    codes = [ord(c) for c in token[:max_chars]]
    out = [[-1] * max_chars for _ in range(n_max)]
    for n in range(1, min(n_max, len(codes)) + 1):
        for i in range(len(codes) - n + 1):
            value = 0
            for c in codes[i:i + n]:
                value = (value * ROLLING_BASE + c) % ROLLING_MODULUS
            out[n - 1][i] = value
    return out


class Hasher:
    """A token's hash bits and bucket, as the codebook leanlm trained with computes them."""

    def __init__(self, state, tables):
        self.kind, self.n_bits, self.n_buckets = state["hash"], state["n_bits"], state["n_buckets"]
        if self.kind == "md5":
            self.key = state["key"].encode("latin-1")
        else:
            self.n_max = state["n_max"]
            self.index = {gram: i for i, gram in enumerate(state["ngrams"])}
            self.planes, self.eta = tables["planes"], tables.get("eta")

    def bits_and_bucket(self, token):
        if self.kind == "md5":
            digest = hmac.new(self.key, token.encode("utf-8"), hashlib.md5).digest()
            bits = [(byte >> shift) & 1 for byte in digest for shift in range(7, -1, -1)][:self.n_bits]
            bucket = int.from_bytes(digest, "big") % self.n_buckets if self.n_buckets else 0
            return bits, bucket
        counts = {}  # the token's known n-grams and their counts, in feature order (as a CSR row)
        for n in range(1, self.n_max + 1):
            for i in range(len(token) - n + 1):
                column = self.index.get(token[i:i + n])
                if column is not None:
                    counts[column] = counts.get(column, 0) + 1
        columns = sorted(counts)
        # Sums in float64, one n-gram at a time in that order: the same roundings as leanlm's (SciPy's).
        scores = torch.zeros(self.n_bits, dtype=torch.float64)
        for column in columns:
            scores += float(counts[column]) * self.planes[column]
        bits = (scores >= 0).long().tolist()
        bucket = 0
        if self.n_buckets and columns:
            shifted = torch.cat([self.eta, self.eta[:self.n_buckets]])
            scores = torch.zeros(self.n_buckets, dtype=torch.float64)
            for column in columns:
                scores += float(counts[column]) * shifted[column + 1:column + 1 + self.n_buckets]
            bucket = int(scores.argmax())
        return bits, bucket


class LeanHashTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"codebook_file": "hash_codebook.json", "tables_file": "hash_codebook.safetensors",
                         "pieces_file": "hash_pieces.json"}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, codebook_file, tables_file=None, pieces_file=None, **kwargs):
        with open(codebook_file, encoding="utf-8") as f:
            self.state = json.load(f)
        self.files = {"codebook_file": codebook_file, "tables_file": tables_file, "pieces_file": pieces_file}
        tables = {}
        if tables_file:
            from safetensors.torch import load_file

            tables = load_file(tables_file)
        self.hasher = Hasher(self.state, tables) if self.state["hash"] else None
        self.rows, self.row_of, self.cache = list(SPECIAL_TOKENS), {t: i for i, t in enumerate(SPECIAL_TOKENS)}, {}
        self.pieces = None
        if pieces_file:
            from tokenizers import Tokenizer

            self.pieces = Tokenizer.from_file(pieces_file)
            vocab = self.pieces.get_vocab(with_added_tokens=True)
            # The pieces' special tokens take the special rows by role (RoBERTa's <s> is [CLS]'s row).
            names = {vocab[piece]: name for piece, name in self.state["special_pieces"].items()}
            self.to_row = [self._row(names.get(i, piece)) for piece, i in sorted(vocab.items(), key=lambda kv: kv[1])]
        for name, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS):
            kwargs.setdefault(f"{name}_token", token)
        super().__init__(**kwargs)

    def _row(self, token):
        """The token's row; a token met for the first time gets the next one."""
        if token not in self.row_of:
            self.row_of[token] = len(self.rows)
            self.rows.append(token)
        return self.row_of[token]

    # -- what transformers asks of a vocabulary ---------------------------------------------------------
    @property
    def vocab_size(self):
        return len(self.rows)

    def get_vocab(self):
        return dict(self.row_of)

    def _tokenize(self, text, **kwargs):
        if self.pieces is None:
            return word_tokenize(text)
        return [self.rows[self.to_row[i]] for i in self.pieces.encode(text, add_special_tokens=False).ids]

    def _convert_token_to_id(self, token):
        return self._row(token)

    def _convert_id_to_token(self, index):
        return self.rows[index]

    def save_vocabulary(self, save_directory, filename_prefix=None):
        written = []
        for key, name in self.vocab_files_names.items():
            if self.files[key]:
                target = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + name)
                if os.path.abspath(self.files[key]) != os.path.abspath(target):
                    shutil.copyfile(self.files[key], target)
                written.append(target)
        return tuple(written)

    # -- leanlm's encoding -----------------------------------------------------------------------------
    def encode_rows(self, pairs, max_length):
        """Rows and type ids of each ``(a, b or None)``, as leanlm's codebook tokenizers lay them out."""
        if self.pieces is None:
            return [assemble([self._row(t) for t in word_tokenize(a)],
                             None if b is None else [self._row(t) for t in word_tokenize(b)], max_length)
                    for a, b in pairs]
        if max_length is None:
            self.pieces.no_truncation()
        else:
            self.pieces.enable_truncation(max_length=max_length)
        encodings = self.pieces.encode_batch([a if b is None else (a, b) for a, b in pairs])
        return [([self.to_row[i] for i in e.ids], list(e.type_ids)) for e in encodings]

    def token_features(self, row):
        """The features of one row: ``{name: value}``, computed once per row."""
        if row not in self.cache:
            special, token, out = row < len(SPECIAL_TOKENS), self.rows[row], {}
            names = self.state["features"]
            if "hash_bits" in names or "hash_buckets" in names:
                bits, bucket = ([0] * self.hasher.n_bits, 0) if special else self.hasher.bits_and_bucket(token)
                out.update(hash_bits=[float(b) for b in bits], hash_buckets=bucket)
            if "char_ngram_hashes" in names:
                n_max, max_chars = self.state["ngram"], self.state["max_chars"]
                out["char_ngram_hashes"] = ([[-1] * max_chars for _ in range(n_max)] if special
                                            else rolling_hashes(token, n_max, max_chars))
            self.cache[row] = {name: out[name] for name in names}
        return self.cache[row]

    def __call__(self, text, text_pair=None, padding=True, truncation=None, max_length=None,
                 return_tensors=None, **kwargs):
        """``input_ids``, ``token_type_ids``, ``attention_mask`` and the embedding's features of a text, a
        pair, or a batch of them; padded on the right to the longest (or to ``max_length`` with
        ``padding="max_length"``), cut to ``max_length`` (default: the model's longest input) with
        ``truncation``."""
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        others = [None] * len(texts) if text_pair is None else ([text_pair] if single else list(text_pair))
        limit = (max_length or self.model_max_length) if truncation else None
        encoded = self.encode_rows(list(zip(texts, others)), limit)
        width = max(len(ids) for ids, _ in encoded)
        if padding == "max_length" and max_length:
            width = max(width, max_length)
        batch = {"input_ids": [], "token_type_ids": [], "attention_mask": []}
        batch.update({name: [] for name in self.state["features"]})
        for ids, types in encoded:
            fill = width - len(ids) if padding else 0
            batch["input_ids"].append(ids + [0] * fill)
            batch["token_type_ids"].append(types + [0] * fill)
            batch["attention_mask"].append([1] * len(ids) + [0] * fill)
            rows = [self.token_features(row) for row in batch["input_ids"][-1]]
            for name in self.state["features"]:
                batch[name].append([row[name] for row in rows])
        if single:
            batch = {k: v[0] for k, v in batch.items()}
        return BatchEncoding(batch, tensor_type=return_tensors)
