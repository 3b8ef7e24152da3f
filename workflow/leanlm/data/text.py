"""Plain-text helpers shared by the corpus and the task builders: cleaning, sentences, words.

Everything here is a pure function of its input (no RNG, no I/O), so the corpus and the task sets
built from the same raw files are identical on every machine.
"""

from __future__ import annotations

import hashlib
import html
import re
import unicodedata

# Control and invisible format characters that survive NFKC and would otherwise reach the tokenizer
# (zero-width spaces, BOMs, bidi marks). Tabs become spaces; the Unicode line/paragraph separators
# become newlines so they split paragraphs like "\n" does.
_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060\ufeff]")
_LINE_SEPARATORS = re.compile(r"\r\n|\r|\u2028|\u2029|\x85")


def clean_text(text: str) -> str:
    """Unescape HTML entities, NFKC-normalise, drop invisible characters, collapse spaces.

    Paragraph structure is kept: one paragraph per line, no empty lines, no leading/trailing space.
    """
    text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = _LINE_SEPARATORS.sub("\n", text)
    text = _INVISIBLE.sub("", text)
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def dedupe_key(text: str) -> str:
    """A key equal for texts that differ only in case and spacing (used to drop duplicates)."""
    return hashlib.sha1(" ".join(text.casefold().split()).encode("utf-8")).hexdigest()


def count_words(text: str) -> int:
    """Whitespace-separated words: the unit STATS.json reports (tokenizer-independent)."""
    return len(text.split())


# Abbreviations whose full stop does not end a sentence (lowercased, without the final dot).
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc inc ltd co corp bros dept univ assn
    jan feb mar apr jun jul aug sep sept oct nov dec gen gov sen rep lt col capt sgt cmdr adm
    no nos vol vols fig figs eq p pp ch sec approx ca cf al e.g i.e u.s u.k u.n a.m p.m op ed""".split()
)
# A sentence boundary candidate: terminal punctuation, optional closing quotes/brackets, whitespace,
# then something that can start a sentence (capital, digit, opening quote or bracket).
_BOUNDARY = re.compile(r"""[.!?]+["'\u201d\u2019)\]]*\s+(?=["'\u201c\u2018(\[]?[A-Z0-9])""")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences; paragraphs (lines) never share a sentence.

    A rule-based splitter (terminal punctuation followed by a capitalised word) that knows common
    abbreviations and initials ("J. R. R. Tolkien", "Dr. Smith", "U.S. Army").
    """
    sentences: list[str] = []
    for paragraph in text.split("\n"):
        start = 0
        for match in _BOUNDARY.finditer(paragraph):
            before = paragraph[start : match.start() + 1].split()
            last = before[-1].rstrip(".!?").lstrip("\"'(\u201c\u2018[").lower() if before else ""
            if paragraph[match.start()] == "." and (last in _ABBREVIATIONS or _is_initial(last)):
                continue
            sentence = paragraph[start : match.end()].strip()
            if sentence:
                sentences.append(sentence)
            start = match.end()
        tail = paragraph[start:].strip()
        if tail:
            sentences.append(tail)
    return sentences


def _is_initial(word: str) -> bool:
    # "j" of "J. R. R. Tolkien" or "j.r.r" of "J.R.R. Tolkien": single letters joined by dots.
    return bool(word) and all(len(part) == 1 and part.isalpha() for part in word.split("."))


_NOT_PROSE = re.compile(r"[{}\[\]|=<>*#_\\~^@]|https?:|www\.")


def is_prose_sentence(sentence: str, min_words: int, max_words: int) -> bool:
    """True for a well-formed prose sentence: capitalised, terminated, mostly words, no markup.

    Task builders use it so that stand-in examples are made of clean sentences, not list items,
    headings or markup left over from a source.
    """
    words = sentence.split()
    if not min_words <= len(words) <= max_words:
        return False
    first = sentence.lstrip("\"'(\u201c\u2018")
    if not first or not (first[0].isupper() or first[0].isdigit()):
        return False
    if sentence.rstrip("\"')\u201d\u2019")[-1:] not in (".", "!", "?"):
        return False
    if _NOT_PROSE.search(sentence):
        return False
    alphabetic = sum(1 for w in words if any(c.isalpha() for c in w))
    return alphabetic >= 0.8 * len(words)


# English function words: never chosen as the "content word" a task builder replaces, and never
# drawn as its replacement. Negations are listed separately because deleting one flips meaning.
NEGATIONS = frozenset("not no never nor neither without none nobody nothing nowhere cannot".split())
STOPWORDS = frozenset(
    """a an the and or but if then else when while as of at by for with about against between into
    through during before after above below to from up down in out on off over under again further
    once here there where why how all any both each few more most other some such only own same so
    than too very can will just should would could may might must shall i me my myself we our ours
    ourselves you your yours yourself yourselves he him his himself she her hers herself it its itself
    they them their theirs themselves what which who whom this that these those am is are was were be
    been being have has had having do does did doing also because until one two three many much upon
    its however although though yet still even ever""".split()
) | NEGATIONS


def is_content_word(word: str) -> bool:
    """A lowercase alphabetic word of four or more letters that is not a function word."""
    return len(word) >= 4 and word.isalpha() and word.islower() and word not in STOPWORDS
