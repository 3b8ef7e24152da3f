"""Packaged GLUE stand-ins: one builder per task, from real English text in the packaged raw files.

Each stand-in has its GLUE task's input shape, label type, label ids and metric (params/tasks.yaml
describes each one). Rules shared by all builders:

- The units a task is made of (sentences, documents, snippets, questions, dialogue pairs) go to
  train/validation/test (80/10/10) by a hash of the seed, the task and the unit's text, so no text is
  shared between the splits of a task; within a split, units are visited in a fixed order.
- One ``random.Random`` per task (:func:`leanlm.data.splitting.task_rng`), no global RNG state.
- Class priors follow the real task where that shapes its metric (CoLA 70% acceptable for Matthews,
  QQP 37% duplicates for F1, MRPC 68% paraphrases).
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

from leanlm.data.sources.packaged_raw import (PROSE_SOURCES, read_dialogues, read_documents, read_movie_snippets,
                                              read_trec)
from leanlm.data.splitting import SPLITS, assign_split
from leanlm.data.text import NEGATIONS, count_words, dedupe_key, is_content_word, is_prose_sentence, split_sentences
from leanlm.errors import DataError
from leanlm.registry import Registry

VALIDATION_FRACTION = TEST_FRACTION = 0.1
SST2_NEUTRAL_BAND = 0.5      # |score| below this is neither positive nor negative: dropped
COLA_ACCEPTABLE = 0.70       # CoLA's share of acceptable sentences
QQP_DUPLICATE = 0.37         # QQP's share of duplicates
MRPC_EQUIVALENT = 0.68       # MRPC's share of paraphrases
_TRIES = 20                  # rejection-sampling attempts before a unit is skipped

# TREC fine-type codes (question_labels.txt) -> names used in question_label_definitions.csv.
_TREC_COARSE = {"ABBR": "ABBREVIATION", "DESC": "DESCRIPTION", "ENTY": "ENTITY", "HUM": "HUMAN",
                "LOC": "LOCATION", "NUM": "NUMERIC"}
_TREC_FINE = {"def": "definition", "desc": "description", "cremat": "creative", "dismed": "dis.med.",
              "instru": "instrument", "techmeth": "technique", "termeq": "term", "veh": "vehicle",
              "gr": "group", "mount": "mountain", "dist": "distance", "ord": "order", "perc": "percent",
              "volsize": "size"}

Rows = dict[str, list[dict]]
STANDINS: Registry[Callable[["StandInSources", "BuildContext"], Rows]] = Registry("packaged GLUE stand-in")


class StandInSources:
    """The packaged raw files, parsed once and shared by every builder of a tasks stage."""

    def __init__(self, raw_dir: Path):
        self.raw_dir = Path(raw_dir)

    @cached_property
    def prose_documents(self) -> list[tuple[str, list[str]]]:
        """(doc_id, sentences) of the prose sources, documents with fewer than two sentences dropped."""
        docs = [(d.doc_id, split_sentences(d.text)) for d in read_documents(self.raw_dir, PROSE_SOURCES)]
        return [(doc_id, sents) for doc_id, sents in docs if len(sents) >= 2]

    @cached_property
    def prose_sentences(self) -> list[str]:
        """Every distinct sentence of the prose sources, in reading order."""
        seen, out = set(), []
        for _, sentences in self.prose_documents:
            for sentence in sentences:
                key = dedupe_key(sentence)
                if key not in seen:
                    seen.add(key)
                    out.append(sentence)
        return out

    @cached_property
    def content_words(self) -> list[str]:
        """Content words seen at least three times in the prose (replacement words for RTE), sorted."""
        counts = Counter(w for s in self.prose_sentences for w in s.split() if is_content_word(w))
        return sorted(w for w, n in counts.items() if n >= 3)

    @cached_property
    def snippets(self):
        seen, out = set(), []
        for snippet in read_movie_snippets(self.raw_dir):
            if dedupe_key(snippet.text) not in seen:
                seen.add(dedupe_key(snippet.text))
                out.append(snippet)
        return out

    @cached_property
    def dialogues(self):
        return read_dialogues(self.raw_dir)

    @cached_property
    def trec(self):
        return read_trec(self.raw_dir)


@dataclass
class BuildContext:
    task: str
    seed: int
    rng: random.Random

    def split(self, key: str) -> str:
        return assign_split(dedupe_key(key), self.seed, VALIDATION_FRACTION, TEST_FRACTION, namespace=self.task)


def _empty() -> Rows:
    return {s: [] for s in SPLITS}


def _row(text_a: str, text_b: str | None, label: int | float) -> dict:
    return {"text_a": text_a, "text_b": text_b, "label": label}


# --- single sentences ------------------------------------------------------------------------------


@STANDINS.register("sst2")
def build_sst2(src: StandInSources, ctx: BuildContext) -> Rows:
    """Movie snippets: 1 positive (score >= 0.5), 0 negative (score <= -0.5)."""
    out = _empty()
    for snippet in src.snippets:
        if abs(snippet.score) >= SST2_NEUTRAL_BAND:
            out[ctx.split(snippet.text)].append(_row(snippet.text, None, int(snippet.score > 0)))
    return out


def corrupt_word_order(sentence: str, rng: random.Random) -> str | None:
    """Swap two adjacent words or move one word two or more places; never the first or last word,
    only purely alphabetic words. None when the sentence offers no such change."""
    words = sentence.split()
    inner = [i for i in range(1, len(words) - 1) if words[i].isalpha()]
    swaps = [i for i in inner if i + 1 in inner and words[i].lower() != words[i + 1].lower()]
    operations = ["swap", "move"]
    rng.shuffle(operations)
    for operation in operations:
        new = list(words)
        if operation == "swap" and swaps:
            i = rng.choice(swaps)
            new[i], new[i + 1] = new[i + 1], new[i]
        elif operation == "move" and len(inner) >= 1 and len(words) >= 5:
            i = rng.choice(inner)
            word = new.pop(i)
            targets = [j for j in range(1, len(new)) if abs(j - i) >= 2]
            if not targets:
                continue
            new.insert(rng.choice(targets), word)
        else:
            continue
        if [w.lower() for w in new] != [w.lower() for w in words]:
            return " ".join(new)
    return None


@STANDINS.register("cola")
def build_cola(src: StandInSources, ctx: BuildContext) -> Rows:
    """Prose sentences: 1 as written, 0 with a local word-order corruption (each sentence used once)."""
    out = _empty()
    for sentence in src.prose_sentences:
        if not is_prose_sentence(sentence, 5, 30):
            continue
        split = ctx.split(sentence)
        if ctx.rng.random() < COLA_ACCEPTABLE:
            out[split].append(_row(sentence, None, 1))
        else:
            corrupted = corrupt_word_order(sentence, ctx.rng)
            if corrupted is not None:
                out[split].append(_row(corrupted, None, 0))
    return out


# --- sentence pairs from prose documents -------------------------------------------------------------


def _documents_by_split(src: StandInSources, ctx: BuildContext) -> dict[str, list[tuple[list[str], list[int]]]]:
    # Per split: (sentences, indices of usable sentences) of each document, split by document. A
    # sentence is usable in the first document that has it only, so no text reaches two splits.
    out: dict[str, list] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for doc_id, sentences in src.prose_documents:
        usable = []
        for i, sentence in enumerate(sentences):
            key = dedupe_key(sentence)
            if key not in seen and is_prose_sentence(sentence, 4, 50):
                usable.append(i)
            seen.add(key)
        if usable:
            out[ctx.split(doc_id)].append((sentences, usable))
    return out


def _far_sentence(sentences: list[str], usable: list[int], i: int, rng: random.Random) -> str | None:
    # A usable sentence of the same document at least two positions away from sentence i.
    for _ in range(_TRIES):
        j = rng.choice(usable)
        if abs(j - i) >= 2:
            return sentences[j]
    return None


def _other_document_sentence(docs: list, d: int, rng: random.Random) -> str | None:
    for _ in range(_TRIES):
        e = rng.randrange(len(docs))
        if e != d:
            sentences, usable = docs[e]
            return sentences[rng.choice(usable)]
    return None


@STANDINS.register("mnli")
def build_mnli(src: StandInSources, ctx: BuildContext) -> Rows:
    """B is the next sentence (0), a far sentence of the same document (1) or another document's (2)."""
    out = _empty()
    for split, docs in _documents_by_split(src, ctx).items():
        for d, (sentences, usable) in enumerate(docs):
            ok = set(usable)
            for i in usable:
                labels = [0] if i + 1 in ok else []
                labels += [1, 2]
                label = ctx.rng.choice(labels)
                if label == 0:
                    b = sentences[i + 1]
                elif label == 1:
                    b = _far_sentence(sentences, usable, i, ctx.rng)
                else:
                    b = _other_document_sentence(docs, d, ctx.rng)
                if b is not None:
                    out[split].append(_row(sentences[i], b, label))
    return out


@STANDINS.register("qqp")
def build_qqp(src: StandInSources, ctx: BuildContext) -> Rows:
    """B follows A (1) or is a random sentence, same document or not (0)."""
    out = _empty()
    for split, docs in _documents_by_split(src, ctx).items():
        for d, (sentences, usable) in enumerate(docs):
            ok = set(usable)
            for i in usable:
                if i + 1 not in ok:
                    continue
                if ctx.rng.random() < QQP_DUPLICATE:
                    out[split].append(_row(sentences[i], sentences[i + 1], 1))
                    continue
                same_document = ctx.rng.random() < 0.5
                b = _far_sentence(sentences, usable, i, ctx.rng) if same_document else None
                b = b if b is not None else _other_document_sentence(docs, d, ctx.rng)
                if b is not None:
                    out[split].append(_row(sentences[i], b, 0))
    return out


def _delete_span(words: list[str], rng: random.Random) -> tuple[int, int] | None:
    # A span [start, end) of 1-3 inner words holding no negation, or None.
    k = rng.randint(1, 3)
    starts = [i for i in range(1, len(words) - k)
              if not any(w.lower().strip(",.;:\"'") in NEGATIONS or "n't" in w.lower() for w in words[i:i + k])]
    if not starts:
        return None
    start = rng.choice(starts)
    return start, start + k


@STANDINS.register("rte")
def build_rte(src: StandInSources, ctx: BuildContext) -> Rows:
    """B = A minus a span (0 entailment), or minus a span with a content word replaced (1)."""
    out = _empty()
    vocabulary = src.content_words
    if len(vocabulary) < 2:
        raise DataError("the packaged prose has too few content words to build the RTE stand-in")
    # Every B must be a new text: not a sentence of the prose, not a B made from another sentence.
    taken = {dedupe_key(s) for s in src.prose_sentences}
    for sentence in src.prose_sentences:
        if not is_prose_sentence(sentence, 8, 35):
            continue
        words = sentence.split()
        span = _delete_span(words, ctx.rng)
        if span is None:
            continue
        kept = [i for i in range(len(words)) if not span[0] <= i < span[1]]
        label = int(ctx.rng.random() < 0.5)
        if label == 1:
            replaceable = [i for i in kept if is_content_word(words[i])]
            if not replaceable:
                continue
            position = ctx.rng.choice(replaceable)
            replacement = ctx.rng.choice(vocabulary)
            while replacement == words[position]:
                replacement = ctx.rng.choice(vocabulary)
            words = list(words)
            words[position] = replacement
        b = " ".join(words[i] for i in kept)
        if dedupe_key(b) not in taken:
            taken.add(dedupe_key(b))
            out[ctx.split(sentence)].append(_row(sentence, b, label))
    return out


# --- snippets, questions, dialogues ------------------------------------------------------------------


@STANDINS.register("stsb")
def build_stsb(src: StandInSources, ctx: BuildContext) -> Rows:
    """Snippet pairs, target 5 * (1 - |sA - sB| / R); B chosen for a target drawn uniformly from 0..5."""
    snippets = src.snippets
    lo, hi = min(s.score for s in snippets), max(s.score for s in snippets)
    score_range = hi - lo
    if score_range <= 0:
        raise DataError("the movie snippets all have the same sentiment score; cannot build the STS-B stand-in")
    by_split: dict[str, list] = {s: [] for s in SPLITS}
    for snippet in snippets:
        by_split[ctx.split(snippet.text)].append(snippet)
    out = _empty()
    for split, items in by_split.items():
        items.sort(key=lambda s: (s.score, s.text))
        scores = [s.score for s in items]
        for a_index, a in enumerate(items):
            target = ctx.rng.uniform(0.0, 5.0)
            gap = (1.0 - target / 5.0) * score_range
            wanted = a.score + gap if ctx.rng.random() < 0.5 else a.score - gap
            if not lo <= wanted <= hi:  # mirror into range, then clamp
                wanted = min(hi, max(lo, 2 * a.score - wanted))
            at = bisect.bisect_left(scores, wanted)
            candidates = [j for j in range(max(0, at - 3), min(len(items), at + 3)) if j != a_index]
            if not candidates:
                continue
            b = items[ctx.rng.choice(candidates)]
            similarity = 5.0 * (1.0 - abs(a.score - b.score) / score_range)
            out[split].append(_row(a.text, b.text, round(min(5.0, max(0.0, similarity)), 4)))
    return out


def _answer_type_sentence(coarse: str, fine: str, definitions: dict[tuple[str, str], str]) -> str:
    coarse_name = _TREC_COARSE.get(coarse)
    fine_name = _TREC_FINE.get(fine, fine)
    description = definitions.get((coarse_name, fine_name)) if coarse_name else None
    if description is None:
        raise DataError(f"TREC answer type {coarse}:{fine} has no definition in question_label_definitions.csv")
    description = description.replace("sth.", "something")
    return f"This question asks for {description} ({coarse_name.lower()})."


@STANDINS.register("qnli")
def build_qnli(src: StandInSources, ctx: BuildContext) -> Rows:
    """TREC question + an answer-type sentence: its own type (0 entailment) or another's (1)."""
    questions, definitions = src.trec
    by_split: dict[str, list] = {s: [] for s in SPLITS}
    for question in questions:
        by_split[ctx.split(question.text)].append(question)
    out = _empty()
    for split, items in by_split.items():
        for question in items:
            label = int(ctx.rng.random() < 0.5)
            answer_type = (question.coarse, question.fine)
            if label == 1:  # the type of another question of the split: same marginal as the positives
                for _ in range(_TRIES):
                    other = ctx.rng.choice(items)
                    if (other.coarse, other.fine) != answer_type:
                        answer_type = (other.coarse, other.fine)
                        break
                else:
                    continue
            out[split].append(_row(question.text, _answer_type_sentence(*answer_type, definitions), label))
    return out


@STANDINS.register("mrpc")
def build_mrpc(src: StandInSources, ctx: BuildContext) -> Rows:
    """Dialogue pairs: B is A's real reply (1) or the reply of another pair of the split (0)."""
    by_split: dict[str, list] = {s: [] for s in SPLITS}
    seen = set()
    for pair in src.dialogues:
        if not (3 <= count_words(pair.statement) <= 40 and 3 <= count_words(pair.reply) <= 40):
            continue
        # Every statement and every reply appears once, so no text reaches two splits.
        keys = (dedupe_key(pair.statement), dedupe_key(pair.reply))
        if keys[0] != keys[1] and not seen.intersection(keys):
            seen.update(keys)
            by_split[ctx.split(pair.statement)].append(pair)
    out = _empty()
    for split, pairs in by_split.items():
        for pair in pairs:
            if ctx.rng.random() < MRPC_EQUIVALENT:
                out[split].append(_row(pair.statement, pair.reply, 1))
                continue
            for _ in range(_TRIES):
                other = ctx.rng.choice(pairs)
                if dedupe_key(other.reply) != dedupe_key(pair.reply):
                    out[split].append(_row(pair.statement, other.reply, 0))
                    break
    return out
