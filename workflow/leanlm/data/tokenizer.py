"""The tokenizer stage: tokenizer/tokenizer.json, a Hugging Face ``tokenizers`` file.

- ``kind: wordpiece`` (packaged profiles): a BERT-style WordPiece trained on corpus/train.jsonl with
  ``data.tokenizer.vocab_size`` entries; special tokens [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.
- ``kind: hub`` (paper): ``data.tokenizer.name`` (BERT's own 30K WordPiece, §3.4.4) through
  ``transformers.AutoTokenizer``; its backend tokenizer is saved to the same file. Its special-token
  ids are BERT's (e.g. [PAD]=0, [CLS]=101), so code must look ids up by token
  (:func:`special_token_ids`), never assume the packaged numbering.

Either way ``encode(a)`` gives ``[CLS] a [SEP]`` and ``encode(a, b)`` gives ``[CLS] a [SEP] b [SEP]``
with type ids 0 for the first segment and 1 for the second. :func:`load_tokenizer` is what training
code calls.

A profile's named tokenizers (``data.tokenizers``, ch. 4's Pythia BPE: :mod:`leanlm.data.pretrain_data`)
come through :func:`hub_tokenizer` too but need not be BERT-style: Pythia's has no [CLS]/[SEP]/[MASK],
only ``<|endoftext|>`` (:data:`EOS_TOKENS`), which separates documents when a causal LM is pretrained.
Ch. 2's BERT baselines use RoBERTa's BPE, whose special tokens play BERT's roles under other names
(<pad> <unk> <s> </s> <mask>): code asks for a role (:func:`special_token_id`, :data:`ROLE_NAMES`), never
for a name, and BERT's names are tried first, so a WordPiece tokenizer keeps exactly its ids.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import atomic_path, write_json

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Special tokens by role, each role's names in order of preference: BERT's WordPiece names first (so a
# BERT-style tokenizer keeps exactly its ids), then RoBERTa's byte-level BPE names (ch. 2's BERT
# baselines count 50,265 RoBERTa entries, Table 2.2): <s> ... </s> plays [CLS] ... [SEP].
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask")
ROLE_NAMES = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
}
# End-of-text tokens of BPE vocabularies without BERT's special tokens (GPT-2/Pythia, then RoBERTa/Llama style).
EOS_TOKENS = ("<|endoftext|>", "</s>")
TOKENIZER_FILE = "tokenizer.json"
_BIGRAM = re.compile(r"(?=(\S\S))")  # every pair of adjacent non-space characters


def _is_bert_punctuation(char: str) -> bool:
    # What BertPreTokenizer isolates as its own word: ASCII punctuation and Unicode category P*.
    return (char.isascii() and not char.isalnum() and not char.isspace()) or unicodedata.category(char).startswith("P")


def _alphabet(texts: Iterable[str], normalizer: normalizers.Normalizer, size: int) -> tuple[list[str], list[str]]:
    """The ``size`` most frequent characters after normalisation (ties broken by the character), and
    the "##" + character tokens the trainer will create for those that occur inside a word."""
    counts: Counter[str] = Counter()
    bigrams: set[str] = set()
    for text in texts:
        normalized = normalizer.normalize_str(text)
        counts.update(normalized)
        bigrams.update(_BIGRAM.findall(normalized))
    for char in [c for c in counts if c.isspace()]:
        del counts[char]
    alphabet = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
    kept = set(alphabet)
    inside = {b[1] for b in bigrams if b[1] in kept and not _is_bert_punctuation(b[0]) and not _is_bert_punctuation(b[1])}
    return alphabet, sorted(f"##{c}" for c in inside)


def _bert_tokenizer(vocab: dict[str, int] | None, lowercase: bool) -> Tokenizer:
    # BERT's normaliser (accents stripped when lowercasing, control characters removed, CJK split)
    # and pre-tokeniser (whitespace and punctuation); "##" marks word continuations.
    model = models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##") if vocab else \
        models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##")
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def _canonical_vocab(vocab: dict[str, int]) -> dict[str, int]:
    # WordPiece encodes by longest match over the vocabulary *set*, so ids are free to choose: special
    # tokens first ([PAD]=0 ... [MASK]=4), then single characters, then "##" + character, then every
    # other entry, each group sorted. Stable ids make the file a pure function of the vocabulary.
    def group(token: str) -> int:
        if token.startswith("##") and len(token) == 3:
            return 1
        return 0 if len(token) == 1 else 2

    rest = sorted((t for t in vocab if t not in SPECIAL_TOKENS), key=lambda t: (group(t), t))
    return {token: index for index, token in enumerate([*SPECIAL_TOKENS, *rest])}


def train_wordpiece(texts: Callable[[], Iterable[str]], vocab_size: int, lowercase: bool) -> Tokenizer:
    """Train a BERT-style WordPiece tokenizer on the texts ``texts()`` yields (read twice).

    Deterministic: the same corpus gives the same tokenizer.json. The ``tokenizers`` trainer breaks
    ties between equally frequent merges by token id, and numbers "##" + character tokens in hash-map
    order; giving it the alphabet and those tokens up front (as leading entries) fixes every id, so
    every merge, and the vocabulary, is the same on every run.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 32:
        raise DataError(f"data.tokenizer.vocab_size={vocab_size} is too small for a WordPiece vocabulary")
    scratch = _bert_tokenizer(None, lowercase)
    # Rare characters (one-off Greek, CJK, symbols) would otherwise take a sizeable share of a small
    # vocabulary; words made of characters outside the alphabet become [UNK].
    alphabet, continuations = _alphabet(texts(), scratch.normalizer, max(100, min(1000, vocab_size // 20)))
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    scratch.train_from_iterator(texts(), trainer=trainer)
    # A fresh tokenizer: only the five real special tokens are "special" (never split, skipped on decode).
    tokenizer = _bert_tokenizer(_canonical_vocab(scratch.get_vocab()), lowercase)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    ids = special_token_ids(tokenizer)
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", ids["sep"]), ("[CLS]", ids["cls"]))
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def hub_tokenizer(name: str, profile: str, key: str = "data.tokenizer.name") -> Tokenizer:
    """The backend (``tokenizers``) tokenizer of hub tokenizer ``name`` (the profile's ``key``), from the
    hub mirror's folder when one is set; fails fast when offline without one."""
    from leanlm.data.sources.hub import ensure_hub_reachable
    from leanlm.data.plumbing.mirror import mirrored_tokenizer

    source = mirrored_tokenizer(name, profile)
    if source is None:
        ensure_hub_reachable(f"tokenizer {name}", profile)
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(source) if source is not None else name, use_fast=True)
    except Exception as exc:  # transformers raises OSError/ValueError/HTTP errors; report them as data errors
        raise DataError(f"could not load hub tokenizer {name!r} ({key}): {exc}") from exc
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise DataError(f"hub tokenizer {name!r} has no fast (tokenizers) version; choose another {key}")
    return backend


def special_token_id(tokenizer, role: str) -> int | None:
    """Id of the tokenizer's special token for ``role`` (pad, unk, cls, sep, mask) under any of its
    :data:`ROLE_NAMES` (BERT's name first), or None when it has none."""
    for token in ROLE_NAMES[role]:
        index = tokenizer.token_to_id(token)
        if index is not None:
            return index
    return None


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """Ids of the special tokens by role: pad, unk, cls, sep, mask, named BERT's way ([PAD] [UNK] [CLS]
    [SEP] [MASK]) or RoBERTa's (<pad> <unk> <s> </s> <mask>); DataError when a role has neither."""
    ids = {}
    for role in SPECIAL_ROLES:
        index = special_token_id(tokenizer, role)
        if index is None:
            raise DataError(f"the tokenizer has no {role} token (any of {ROLE_NAMES[role]}); BERT- or "
                            f"RoBERTa-style special tokens are required")
        ids[role] = index
    return ids


def eos_token_id(tokenizer: Tokenizer) -> int | None:
    """Id of the tokenizer's end-of-text token (the first of :data:`EOS_TOKENS` it has), or None."""
    for token in EOS_TOKENS:
        index = tokenizer.token_to_id(token)
        if index is not None:
            return index
    return None


def is_bert_style(tokenizer: Tokenizer) -> bool:
    """True when the tokenizer has a token for each of BERT's special roles (pad, unk, cls, sep, mask),
    named BERT's way or RoBERTa's (:data:`ROLE_NAMES`)."""
    return all(special_token_id(tokenizer, role) is not None for role in SPECIAL_ROLES)


def stored_special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """The special-token ids META.json records: BERT's five roles (RoBERTa's too), or for an end-of-text BPE (Pythia)
    ``{"eos": id}`` (DataError when it has neither)."""
    if is_bert_style(tokenizer):
        return special_token_ids(tokenizer)
    eos = eos_token_id(tokenizer)
    if eos is None:
        raise DataError(f"the tokenizer has neither BERT's special tokens {SPECIAL_TOKENS} nor an end-of-text "
                        f"token {EOS_TOKENS}; one of them is needed to mark document boundaries")
    return {"eos": eos}


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path, meta: dict) -> Path:
    """Write tokenizer.json and META.json (kind, vocabulary size, special-token ids) atomically."""
    path = Path(out_dir) / TOKENIZER_FILE
    with atomic_path(path, suffix=".json") as tmp:
        tokenizer.save(str(tmp))
    write_json(Path(out_dir) / "META.json", {
        **meta,
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "special_token_ids": stored_special_ids(tokenizer),
    })
    return path


def load_tokenizer(profile_or_path: str | os.PathLike) -> Tokenizer:
    """Load the tokenizer of a profile (``"smoke"`` -> data/smoke/tokenizer/tokenizer.json), or from
    a tokenizer.json file or a directory holding one."""
    candidate = Path(profile_or_path)
    if candidate.is_dir():
        candidate = candidate / TOKENIZER_FILE
    elif not candidate.suffix and os.sep not in str(profile_or_path) and not candidate.exists():
        candidate = paths.data_dir(str(profile_or_path)) / "tokenizer" / TOKENIZER_FILE
    if not candidate.is_file():
        raise DataError(f"no tokenizer at {candidate}; run the tokenizer stage "
                        f"(`leanlm data tokenizer --params params/<profile>.yaml`) first")
    try:
        return Tokenizer.from_file(str(candidate))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
        raise DataError(f"{candidate} is not a valid tokenizers file ({exc}); rerun the tokenizer stage") from exc
