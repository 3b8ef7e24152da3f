"""SQuAD v1.1 / v2.0's packaged cloze stand-ins (params/tasks/squad.yaml); the hub loader is beside them
(:mod:`leanlm.data.families.squad`).

Rows are span-QA rows (leanlm.data.tasks): ``{idx, context, question, answers: {text: [...],
answer_start: [...]}}``, empty lists for an unanswerable question (v2.0).

Cloze questions on prose (Wikipedia sample, Lee news, NYT editorials),
in the manner of cloze-to-question generation (Lewis et al., 2019). Passages are runs of consecutive
sentences of one document (at most :data:`PASSAGE_MAX_WORDS` words, SQuAD paragraphs average about
120). Each prose sentence of a passage gives at most one question: one span of the sentence, a number,
a year, a capitalised name or a noun phrase (type drawn uniformly among those present, then the span),
is replaced by a wh-phrase ("how many", "when" / "what year", "what") and the sentence ends in "?";
the answer is that span at its offset in the passage. v2.0 moves about a third of the questions
(:data:`SQUAD2_UNANSWERABLE`, as in SQuAD 2.0's train set) to another passage of the same document
(else of the split) whose text does not contain the answer: unanswerable, yet on topic.

Text held out of pretraining: when the corpus stage has run (data/<profile>/corpus/), validation and
test passages come only from documents of the corpus's validation/test splits, dealt alternately
(in hash order) to the two, so evaluation text was never pretraining text; train passages come from
the other prose documents (fine-tuning on pretraining text is what SQuAD on Wikipedia does too).
Without a corpus the documents are split 80/10/10 by hash like the GLUE stand-ins. No sentence
occurs in two splits.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from leanlm.data.families.glue_standins import BuildContext, Rows, StandInSources, _empty
from leanlm.data.splitting import SPLITS, unit_interval
from leanlm.data.text import STOPWORDS, dedupe_key, is_prose_sentence
from leanlm.io import iter_jsonl
from leanlm.registry import Registry

log = logging.getLogger(__name__)

SQUAD2_UNANSWERABLE = 1 / 3  # SQuAD 2.0 train: 43,498 of 130,319 questions have no answer
STANDINS: Registry = Registry("packaged SQuAD stand-in")  # task -> builder (squad.FAMILY)
PASSAGE_MAX_WORDS = 120      # SQuAD paragraphs average about 120 words
PASSAGE_MIN_WORDS = 30
QUESTION_WORDS = (6, 25)    # words of a sentence that becomes a question (SQuAD questions are shorter)
_TRIES = 20

# --- cloze questions -----------------------------------------------------------------------------

_LEADING = "\"'([{\u201c\u2018"
_TRAILING = ".,;:!?\"')]}\u201d\u2019"
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_YEAR = re.compile(r"1[5-9]\d\d|20\d\d")
_TERMINAL = re.compile(r"[.!]+(?=[\"'\u201d\u2019)]*$)")  # the full stop a question mark replaces
_CONNECTORS = {"of", "de", "du", "von", "van", "and"}


class Word(NamedTuple):
    start: int      # offsets of the word's core (edge punctuation stripped) in the sentence
    end: int
    core: str
    after: str      # punctuation that follows the core: a phrase cannot run past it

    @property
    def closed(self) -> bool:
        return bool(self.after)


class Cloze(NamedTuple):
    question: str
    answer: str
    answer_start: int   # offset of the answer in the sentence
    kind: str           # number | year | name | noun_phrase


def _words(sentence: str) -> list[Word]:
    out = []
    for match in re.finditer(r"\S+", sentence):
        token = match.group()
        left = len(token) - len(token.lstrip(_LEADING))
        core = token[left:].rstrip(_TRAILING)
        if core:
            start = match.start() + left
            out.append(Word(start, start + len(core), core, token[left + len(core):]))
    return out


def _is_name(core: str) -> bool:
    return core[0].isupper() and any(c.isalpha() for c in core) and core not in ("I", "A")


def cloze_candidates(sentence: str) -> dict[str, list[tuple[int, int, int, int, str]]]:
    """Spans of ``sentence`` that can become an answer, by kind: ``(replace_start, replace_end,
    answer_start, answer_end, wh_phrase)``; the replaced region holds the answer (and may hold a
    preposition or article the wh-phrase stands for)."""
    words = _words(sentence)
    out: dict[str, list] = defaultdict(list)
    for i, w in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else None
        if _NUMBER.fullmatch(w.core):
            if _YEAR.fullmatch(w.core):
                prev = words[i - 1] if i else None
                if prev is not None and prev.core.lower() == "in" and not prev.closed:
                    out["year"].append((prev.start, w.end, w.start, w.end, "when"))
                else:
                    out["year"].append((w.start, w.end, w.start, w.end, "what year"))
            elif nxt is not None and not w.closed and nxt.core.isalpha() and nxt.core.islower():
                out["number"].append((w.start, w.end, w.start, w.end, "how many"))
        elif w.core.lower() in ("the", "a", "an") and not w.closed:
            run = []
            for v in words[i + 1 : i + 4]:
                if not (v.core.replace("-", "").isalpha() and v.core.islower() and v.core not in STOPWORDS):
                    break
                run.append(v)
                if v.closed:
                    break
            if run and len(run[-1].core) >= 3:
                out["noun_phrase"].append((w.start, run[-1].end, run[0].start, run[-1].end, "what"))
    # Names: maximal runs of capitalised words after the first word, "of"-style connectors inside.
    i = 1
    while i < len(words):
        # After a colon, a full stop or a quotation mark a capital may start a clause, not a name.
        if not _is_name(words[i].core) or set(words[i - 1].after) - {","}:
            i += 1
            continue
        j = i
        while not words[j].closed and j + 1 < len(words):
            if _is_name(words[j + 1].core):
                j += 1
            elif (words[j + 1].core in _CONNECTORS and not words[j + 1].closed and j + 2 < len(words)
                  and _is_name(words[j + 2].core)):
                j += 2
            else:
                break
        if j - i < 4 and not _NUMBER.fullmatch(words[i].core):
            # "the Royal National Park" -> "what": the article goes with the name it introduces.
            article = words[i - 1].core.lower() == "the" and not words[i - 1].closed
            start = words[i - 1].start if article else words[i].start
            out["name"].append((start, words[j].end, words[i].start, words[j].end, "what"))
        i = j + 1
    return out


def make_cloze(sentence: str, rng) -> Cloze | None:
    """One cloze question from ``sentence`` (kind drawn uniformly among those present), or None."""
    candidates = cloze_candidates(sentence)
    kinds = sorted(k for k, spans in candidates.items() if spans)
    if not kinds:
        return None
    kind = rng.choice(kinds)
    a, b, answer_start, answer_end, wh = rng.choice(candidates[kind])
    question = _TERMINAL.sub("", (sentence[:a] + wh + sentence[b:]).rstrip())
    question = question[0].upper() + question[1:] + ("" if question.endswith("?") else "?")
    if len(question.split()) < 4:
        return None
    return Cloze(question, sentence[answer_start:answer_end], answer_start, kind)


# --- passages and splits ---------------------------------------------------------------------------


class Passage(NamedTuple):
    doc_id: str
    context: str
    sentences: list[tuple[int, str]]   # (offset in context, sentence)


def passages(doc_id: str, sentences: list[str]) -> list[Passage]:
    """Consecutive sentences packed into passages of at most PASSAGE_MAX_WORDS words."""
    out, current, words = [], [], 0

    def close():
        if current and words >= PASSAGE_MIN_WORDS:
            offsets, position = [], 0
            for sentence in current:
                offsets.append((position, sentence))
                position += len(sentence) + 1
            out.append(Passage(doc_id, " ".join(current), offsets))

    for sentence in sentences:
        n = len(sentence.split())
        if current and words + n > PASSAGE_MAX_WORDS:
            close()
            current, words = [], 0
        current.append(sentence)
        words += n
    close()
    return out


def pretraining_heldout(raw_dir: Path) -> set[str] | None:
    """doc_ids of the corpus's validation and test splits (text never pretrained on), or None when
    the corpus stage has not run for this profile (data/<profile>/corpus/ beside raw/)."""
    corpus = Path(raw_dir).parent / "corpus"
    if not (corpus / "train.jsonl").is_file():
        return None
    ids = set()
    for split in ("validation", "test"):
        path = corpus / f"{split}.jsonl"
        if path.is_file():
            ids.update(row["doc_id"] for row in iter_jsonl(path))
    return ids


def _passages_by_split(src: StandInSources, ctx: BuildContext) -> dict[str, list[Passage]]:
    heldout = pretraining_heldout(src.raw_dir)
    if heldout is None:
        log.warning("%s: no corpus under %s; splitting the prose documents by hash instead of holding "
                    "evaluation text out of pretraining", ctx.task, Path(src.raw_dir).parent)
        split_of = ctx.split
    else:  # "evaluation" is dealt to validation and test below, passage by passage
        split_of = lambda doc_id: "evaluation" if doc_id in heldout else "train"  # noqa: E731
    documents = [(split_of(doc_id), doc_id, sentences) for doc_id, sentences in src.prose_documents]
    splits_of_sentence: dict[str, set[str]] = defaultdict(set)
    for split, _, sentences in documents:
        for sentence in sentences:
            splits_of_sentence[dedupe_key(sentence)].add(split)
    out: dict[str, list[Passage]] = {s: [] for s in (*SPLITS, "evaluation")}
    seen_contexts: set[str] = set()
    for split, doc_id, sentences in documents:
        for passage in passages(doc_id, sentences):
            keys = [dedupe_key(s) for _, s in passage.sentences]
            # A sentence that occurs in two splits' documents would share text between them.
            if any(len(splits_of_sentence[k]) > 1 for k in keys) or dedupe_key(passage.context) in seen_contexts:
                continue
            seen_contexts.add(dedupe_key(passage.context))
            out[split].append(passage)
    # Held-out prose is scarce (the corpus holds out a tenth): deal its passages alternately, in an
    # order fixed by hashing, so validation and test are both filled as soon as there are two.
    ranked = sorted(out.pop("evaluation"), key=lambda p: unit_interval(ctx.seed, ctx.task, "evaluation", p.context))
    out["validation"] += ranked[0::2]
    out["test"] += ranked[1::2]
    return out


def _row(context: str, question: str, answer: str | None, start: int | None) -> dict:
    answers = {"text": [answer], "answer_start": [start]} if answer is not None else {"text": [], "answer_start": []}
    return {"context": context, "question": question, "answers": answers}


def _cloze_rows(src: StandInSources, ctx: BuildContext, unanswerable: float) -> Rows:
    out = _empty()
    asked: set[str] = set()
    for split, items in _passages_by_split(src, ctx).items():
        by_document: dict[str, list[int]] = defaultdict(list)
        for p, passage in enumerate(items):
            by_document[passage.doc_id].append(p)
        for p, passage in enumerate(items):
            for offset, sentence in passage.sentences:
                if not is_prose_sentence(sentence, *QUESTION_WORDS) or dedupe_key(sentence) in asked:
                    continue
                cloze = make_cloze(sentence, ctx.rng)
                if cloze is None:
                    continue
                asked.add(dedupe_key(sentence))
                target = _other_passage(items, by_document[passage.doc_id], p, cloze.answer, ctx.rng) \
                    if ctx.rng.random() < unanswerable else None
                if target is not None:
                    out[split].append(_row(target.context, cloze.question, None, None))
                else:
                    out[split].append(_row(passage.context, cloze.question, cloze.answer, offset + cloze.answer_start))
    return out


def _other_passage(items: list[Passage], same_document: list[int], p: int, answer: str, rng) -> Passage | None:
    """A passage other than ``p`` whose text lacks ``answer``: of the same document if one fits."""
    candidates = [q for q in same_document if q != p]
    rng.shuffle(candidates)
    candidates += [rng.randrange(len(items)) for _ in range(_TRIES)]
    for q in candidates:
        if q != p and answer.casefold() not in items[q].context.casefold():
            return items[q]
    return None


@STANDINS.register("squad_v1")
def build_squad_v1(src: StandInSources, ctx: BuildContext) -> Rows:
    """Cloze questions whose answer is a span of the passage (SQuAD v1.1: always answerable)."""
    return _cloze_rows(src, ctx, unanswerable=0.0)


@STANDINS.register("squad_v2")
def build_squad_v2(src: StandInSources, ctx: BuildContext) -> Rows:
    """As squad_v1, with about a third of the questions asked on a passage that lacks the answer."""
    return _cloze_rows(src, ctx, unanswerable=SQUAD2_UNANSWERABLE)
