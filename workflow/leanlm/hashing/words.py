"""Word tokenisation with an unlimited vocabulary (ch. 2, DESIGN §8), and the BPE route (App. 2.11).

HashFormers hash whole words, so there is no vocabulary to fall out of: a text is lowercased and cut
into runs of word characters and runs of punctuation (the official code's ``\\w+|[^\\w\\s]+``), and
every distinct run is a token. The special tokens keep their upper-case spelling so that a text that
already holds them (``[CLS] a [SEP] b [SEP]``) maps them to their fixed rows.

Appendix 2.11 hashes BPE pieces instead of words: :func:`piece_tokenizer` turns a ``tokenizers``
Tokenizer into the same ``text -> list[str]`` callable, so the codebook hashes its pieces' strings.
"""

from __future__ import annotations

import re
from typing import Callable

# Fixed rows 0..4 of every codebook, numbered as the packaged WordPiece tokenizer numbers them.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

WORD_PATTERN = re.compile(r"\w+|[^\w\s]+")
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
_SPECIAL_SET = frozenset(SPECIAL_TOKENS)

Tokenize = Callable[[str], list[str]]


def word_tokenize(text: str) -> list[str]:
    """Lowercased runs of word characters and runs of punctuation; special tokens kept as-is.

    >>> word_tokenize("[CLS] Don't stop!! [SEP]")
    ['[CLS]', 'don', "'", 't', 'stop', '!!', '[SEP]']
    """
    if "[" not in text:  # fast path: no special token can be in the text
        return WORD_PATTERN.findall(text.lower())
    tokens: list[str] = []
    # re.split with a capture group alternates plain text and special tokens.
    for part in _SPECIAL_SPLIT.split(text):
        if part in _SPECIAL_SET:
            tokens.append(part)
        elif part:
            tokens.extend(WORD_PATTERN.findall(part.lower()))
    return tokens


def piece_tokenizer(tokenizer) -> Tokenize:
    """``text -> list[str]`` of a ``tokenizers.Tokenizer``'s pieces (BPE/WordPiece), no specials added.

    The pieces are hashed as strings (ByteLevel BPE keeps its ``Ġ`` word-start marker, which is
    part of what makes ``Ġplay`` and ``play`` different pieces).
    """
    def tokenize(text: str) -> list[str]:
        return tokenizer.encode(text, add_special_tokens=False).tokens

    return tokenize
