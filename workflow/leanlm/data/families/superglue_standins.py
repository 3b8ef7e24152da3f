"""Packaged SuperGLUE stand-ins: one builder per task, from the packaged prose (see glue_standins).

Each has its task's input shape, label ids and metric, and a class prior near the real task's
(params/tasks/superglue.yaml describes each). All are built from the prose documents split by
document (``glue_standins._documents_by_split``: 80/10/10 by a hash of the seed, the task and the
document), so no sentence reaches two splits; one seeded RNG per task (``ctx.rng``).
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict

from leanlm.data.families.glue_standins import (
    BuildContext,
    Rows,
    StandInSources,
    _delete_span,
    _documents_by_split,
    _empty,
    _far_sentence,
    _other_document_sentence,
    _row,
    build_rte,
)
from leanlm.data.families.superglue import COPA_QUESTIONS, multirc_second_text, wic_second_text, wsc_question
from leanlm.data.text import STOPWORDS, dedupe_key, is_content_word, is_prose_sentence
from leanlm.registry import Registry

STANDINS: Registry = Registry("packaged SuperGLUE stand-in")  # task -> builder (superglue.FAMILY)
BOOLQ_TRUE = 0.62            # BoolQ's share of "true" answers
CB_PRIORS = (0.46, 0.48, 0.06)  # CB train: entailment, contradiction, neutral
MULTIRC_TRUE = 0.43          # MultiRC's share of true answer options
WSC_MAX_FALSE = 2            # wrong candidates per text: 1 true + 1-2 false, about 37% true
_TRIES = 20
# Auxiliaries after which "not" goes (CB's contradictions) and before which a subject can stand (WSC).
AUXILIARIES = frozenset("is was are were has have had can will would could should does did do must may might".split())
_CONTRACTED = {"ca": "can", "wo": "will", "sha": "shall"}  # can't, won't, shan't
_CONNECTIVES = frozenset("and but so yet or nor however although though still also then thus hence".split())
_STRIP = ",.;:!?\"'()[]"
WSC_BLOCK = 8                # WSC is split by blocks of 8 sentences: its texts are few and bunched
# A singular noun phrase "<determiner> N"; only "the N" is ever replaced, any of them can be an antecedent.
_NOUN_PHRASE = re.compile(r"\b([Tt]he|[Aa]n?) ([a-z]{4,})\b(?!['\u2019-])")


def _words_of(sentence: str) -> set[str]:
    """The content words of a sentence (lowercase, punctuation stripped)."""
    return {w.strip(_STRIP) for w in sentence.split() if is_content_word(w.strip(_STRIP))}


def _replace_content_word(words: list[str], vocabulary: list[str], rng: random.Random,
                          keep: str | None = None) -> list[str] | None:
    """``words`` with one content word (not ``keep``) replaced by another word of the corpus."""
    positions = [i for i, w in enumerate(words) if is_content_word(w) and w != keep]
    if not positions:
        return None
    position = rng.choice(positions)
    replacement = rng.choice(vocabulary)
    while replacement == words[position]:
        replacement = rng.choice(vocabulary)
    return words[:position] + [replacement] + words[position + 1:]


def _runs(sentences: list[str], usable: list[int], sizes: tuple[int, int], rng: random.Random) -> list[list[int]]:
    """Consecutive usable sentences cut into passages of ``sizes[0]..sizes[1]`` sentences."""
    runs, current = [], []
    for i in usable:
        if current and i != current[-1] + 1:
            runs.append(current)
            current = []
        current.append(i)
    runs.append(current)
    out = []
    for run in runs:
        while len(run) >= sizes[0]:
            size = rng.randint(*sizes)
            out.append(run[:size])
            run = run[size:]
    return out


def _word_index(docs: list) -> dict[str, list[tuple[int, int]]]:
    """content word -> (document, sentence) of every usable sentence holding it, in one split."""
    index: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for d, (sentences, usable) in enumerate(docs):
        for i in usable:
            for word in sorted(_words_of(sentences[i])):
                index[word].append((d, i))
    return index


# --- BoolQ -------------------------------------------------------------------------------------------


def yes_no_question(sentence: str) -> str:
    """ "The river froze." -> "Is it true that the river froze?" (function words lowercased). """
    body = sentence.rstrip(".")
    first, _, rest = body.partition(" ")
    if first.lower() in STOPWORDS:
        first = first.lower()
    return f"Is it true that {first} {rest}?"


def _questionable(sentence: str) -> bool:
    # "Is it true that but ...?" reads badly: no sentence that opens with a connective.
    words = sentence.split()
    return (sentence.endswith(".") and '"' not in sentence and 6 <= len(words) <= 30
            and words[0].lower() not in _CONNECTIVES)


@STANDINS.register("boolq")
def build_boolq(src: StandInSources, ctx: BuildContext) -> Rows:
    """Passage + "Is it true that S?": S from the passage (1), corrupted or from elsewhere (0)."""
    out, vocabulary = _empty(), src.content_words
    for split, docs in _documents_by_split(src, ctx).items():
        for sentences, usable in docs:
            for passage in _runs(sentences, usable, (3, 5), ctx.rng):
                candidates = [i for i in passage if _questionable(sentences[i])]
                if not candidates:
                    continue
                chosen = sentences[ctx.rng.choice(candidates)]
                label = int(ctx.rng.random() < BOOLQ_TRUE)
                if label == 0:
                    outside = [i for i in usable if i not in passage and _questionable(sentences[i])]
                    if outside and ctx.rng.random() < 0.5:
                        chosen = sentences[ctx.rng.choice(outside)]
                    else:
                        words = _replace_content_word(chosen.split(), vocabulary, ctx.rng)
                        if words is None:
                            continue
                        chosen = " ".join(words)
                text = " ".join(sentences[i] for i in passage)
                out[split].append(_row(text, yes_no_question(chosen), label))
    return out


# --- CB ----------------------------------------------------------------------------------------------


def toggle_negation(words: list[str]) -> list[str] | None:
    """Negate at the first auxiliary ("was" -> "was not"; "was not" / "wasn't" -> "was"); None
    when the words have no auxiliary."""
    for i, word in enumerate(words):
        lower = word.lower()
        if lower in AUXILIARIES:
            if i + 1 < len(words) and words[i + 1].lower() == "not":
                return words[: i + 1] + words[i + 2:]
            return words[: i + 1] + ["not"] + words[i + 1:]
        if lower.endswith("n't") and (lower[:-3] in AUXILIARIES or lower[:-3] in _CONTRACTED):
            base = _CONTRACTED.get(lower[:-3], lower[:-3])
            return words[:i] + [word[0] + base[1:] if word[0].isupper() else base] + words[i + 1:]
    return None


def _hypothesis(words: list[str], negate: bool, rng: random.Random) -> str | None:
    if negate:
        words = toggle_negation(words)
        if words is None:
            return None
    span = _delete_span(words, rng)
    if span is None:
        return None
    return " ".join(words[: span[0]] + words[span[1]:])


@STANDINS.register("cb")
def build_cb(src: StandInSources, ctx: BuildContext) -> Rows:
    """Premise + its span-deleted self (0), also negated (1), or another sentence's (2)."""
    out = _empty()
    has_aux = lambda s: 8 <= len(s.split()) <= 35 and toggle_negation(s.split()) is not None  # noqa: E731
    for split, docs in _documents_by_split(src, ctx).items():
        for sentences, usable in docs:
            eligible = [i for i in usable if has_aux(sentences[i])]
            for i in eligible:
                label = ctx.rng.choices((0, 1, 2), weights=CB_PRIORS)[0]
                if label == 2:
                    others = [j for j in eligible if j != i]
                    if not others:
                        continue
                    # Negated half of the time, so "not" alone does not tell neutral from contradiction.
                    hypothesis = _hypothesis(sentences[ctx.rng.choice(others)].split(), ctx.rng.random() < 0.5, ctx.rng)
                else:
                    hypothesis = _hypothesis(sentences[i].split(), label == 1, ctx.rng)
                if hypothesis is not None:
                    out[split].append(_row(sentences[i], hypothesis, label))
    return out


@STANDINS.register("sg_rte")
def build_sg_rte(src: StandInSources, ctx: BuildContext) -> Rows:
    """SuperGLUE's RTE is GLUE's RTE: the same stand-in, split under this task's name."""
    return build_rte(src, ctx)


# --- WiC ---------------------------------------------------------------------------------------------


@STANDINS.register("wic")
def build_wic(src: StandInSources, ctx: BuildContext) -> Rows:
    """Two sentences sharing word w: same document (1, same sense by one sense per discourse) or not (0)."""
    out = _empty()
    for split, docs in _documents_by_split(src, ctx).items():
        index = _word_index(docs)
        for d, (sentences, usable) in enumerate(docs):
            for i in usable:
                # Only words that can give either label, so the label says nothing about the word.
                words = [w for w in sorted(_words_of(sentences[i]))
                         if {e for e, _ in index[w]} - {d} and any(e == d and j != i for e, j in index[w])]
                if not words:
                    continue
                word = ctx.rng.choice(words)
                label = int(ctx.rng.random() < 0.5)
                if label:
                    pool = [(e, j) for e, j in index[word] if e == d and j != i]
                else:
                    pool = [(e, j) for e, j in index[word] if e != d]
                e, j = ctx.rng.choice(pool)
                out[split].append(_row(sentences[i], wic_second_text(word, docs[e][0][j]), label))
    return out


# --- MultiRC -----------------------------------------------------------------------------------------


def _phrase(sentence: str, word: str, rng: random.Random, width: int = 9) -> list[str] | None:
    """Up to ``width`` words of ``sentence`` around one mention of ``word``, end punctuation removed."""
    words = sentence.split()
    at = [k for k, w in enumerate(words) if w.strip(_STRIP) == word]
    if not at:
        return None
    k = rng.choice(at)
    start = max(0, min(k - rng.randint(0, width - 1), len(words) - width))
    phrase = words[start : start + width]
    phrase[-1] = phrase[-1].rstrip(_STRIP) or phrase[-1]
    return phrase


@STANDINS.register("multirc")
def build_multirc(src: StandInSources, ctx: BuildContext) -> Rows:
    """Paragraph, a question about word w, options: phrases around w in it (1) or elsewhere/corrupted (0)."""
    out, vocabulary, number = _empty(), src.content_words, 0
    for split, docs in _documents_by_split(src, ctx).items():
        index = _word_index(docs)
        for d, (sentences, usable) in enumerate(docs):
            for paragraph in _runs(sentences, usable, (4, 6), ctx.rng):
                mentions: dict[str, list[int]] = defaultdict(list)
                for i in paragraph:
                    for word in sorted(_words_of(sentences[i])):
                        mentions[word].append(i)
                repeated = [w for w, at in sorted(mentions.items()) if len(at) >= 2]
                asked: set[str] = set()
                for word in ctx.rng.sample(sorted(mentions), min(2, len(mentions))):
                    if repeated and ctx.rng.random() < 0.5:  # favour words with several true options
                        word = ctx.rng.choice(repeated)
                    if word in asked:
                        continue
                    asked.add(word)
                    at = ctx.rng.sample(mentions[word], min(3, len(mentions[word])))
                    true = [p for p in (_phrase(sentences[i], word, ctx.rng) for i in at) if p]
                    if not true:
                        continue
                    expected = len(true) * (1 - MULTIRC_TRUE) / MULTIRC_TRUE
                    n_false = math.floor(expected) + int(ctx.rng.random() < expected - math.floor(expected))
                    elsewhere = [(e, j) for e, j in index[word] if e != d]
                    false = []
                    for _ in range(_TRIES):
                        if len(false) >= max(1, n_false):
                            break
                        if elsewhere and ctx.rng.random() < 0.5:
                            e, j = ctx.rng.choice(elsewhere)
                            phrase = _phrase(docs[e][0][j], word, ctx.rng)
                        else:
                            phrase = _replace_content_word(ctx.rng.choice(true), vocabulary, ctx.rng, keep=word)
                        if phrase and phrase not in true and phrase not in false:
                            false.append(phrase)
                    if not false:
                        continue
                    options = [(p, 1) for p in true] + [(p, 0) for p in false]
                    ctx.rng.shuffle(options)
                    question, text = f"What does the paragraph say about {word}?", " ".join(sentences[i] for i in paragraph)
                    for phrase, label in options:
                        row = _row(text, multirc_second_text(question, " ".join(phrase)), label)
                        out[split].append({**row, "group": f"{split}-{number}"})
                    number += 1
    return out


# --- COPA --------------------------------------------------------------------------------------------


@STANDINS.register("copa")
def build_copa(src: StandInSources, ctx: BuildContext) -> Rows:
    """Premise; the sentence before ("cause") or after ("effect") it against a distractor."""
    out = _empty()
    for split, docs in _documents_by_split(src, ctx).items():
        for d, (sentences, usable) in enumerate(docs):
            short = {i for i in usable if len(sentences[i].split()) <= 30}
            for i in sorted(short):
                questions = [q for q, j in (("cause", i - 1), ("effect", i + 1)) if j in short]
                if not questions:
                    continue
                question = ctx.rng.choice(questions)
                right = sentences[i - 1 if question == "cause" else i + 1]
                wrong = _far_sentence(sentences, usable, i, ctx.rng) if ctx.rng.random() < 0.5 else None
                wrong = wrong if wrong is not None else _other_document_sentence(docs, d, ctx.rng)
                if wrong is None or wrong == right or len(wrong.split()) > 30:
                    continue
                label = int(ctx.rng.random() < 0.5)
                choices = [wrong, right] if label else [right, wrong]
                out[split].append({**_row(sentences[i], COPA_QUESTIONS[question], label), "choices": choices})
    return out


# --- WSC ---------------------------------------------------------------------------------------------


def _full_noun_phrase(text: str, match: re.Match) -> bool:
    # "the N" is a whole noun phrase (so "it" can stand for it) when what follows cannot continue it.
    rest = text[match.end():]
    if rest[:1] in (",", ".", ";", ":"):
        return True
    if rest[:1] != " " or not rest[1:]:
        return False
    following = rest.split()[0]
    return following in AUXILIARIES or (following in STOPWORDS and following != "of") or \
        (following.endswith("ed") and following.isalpha())


def pronoun_rewrite(text: str, start: int = 0) -> tuple[str, str, list[str]] | None:
    """Replace a repeated mention "the N" (at ``start`` or later) by "it": (new text, its
    antecedent as first written, e.g. "a balloon", the other noun phrases before it), or None."""
    mentions = [m for m in _NOUN_PHRASE.finditer(text) if is_content_word(m.group(2)) and not m.group(2).endswith("s")]
    for k, match in enumerate(mentions):
        if match.start() < start or match.group(1).lower() != "the" or not _full_noun_phrase(text, match):
            continue
        # Each candidate as first written ("a balloon", "the sound"), as WSC's spans are.
        first: dict[str, str] = {}
        for m in mentions[:k]:
            if m.group(2) == match.group(2) or _full_noun_phrase(text, m):
                first.setdefault(m.group(2), m.group(0)[0].lower() + m.group(0)[1:])
        antecedent = first.pop(match.group(2), None)
        if antecedent is not None and first:
            pronoun = "It" if match.group(1) == "The" else "it"
            return text[: match.start()] + pronoun + text[match.end():], antecedent, sorted(first.values())
    return None


def _usable_documents(src: StandInSources) -> list[tuple[str, list[str], list[int]]]:
    """(doc_id, sentences, usable indices) of every prose document, a sentence usable in the first
    document that has it only (as glue_standins._documents_by_split, before the split)."""
    out, seen = [], set()
    for doc_id, sentences in src.prose_documents:
        usable = []
        for i, sentence in enumerate(sentences):
            key = dedupe_key(sentence)
            if key not in seen and is_prose_sentence(sentence, 4, 50):
                usable.append(i)
            seen.add(key)
        if usable:
            out.append((doc_id, sentences, usable))
    return out


@STANDINS.register("wsc")
def build_wsc(src: StandInSources, ctx: BuildContext) -> Rows:
    """Texts with a mention turned into "it": does it refer to the right noun phrase (1) or another (0)?"""
    out = _empty()
    for doc_id, sentences, usable in _usable_documents(src):
        ok = set(usable)
        for i in usable:
            # One sentence, or two when the earlier one is in the same block (so in the same split);
            # the replaced mention is always in sentence i, so no rewrite is made twice.
            found = pronoun_rewrite(sentences[i])
            if found is None and i - 1 in ok and (i - 1) // WSC_BLOCK == i // WSC_BLOCK:
                found = pronoun_rewrite(f"{sentences[i - 1]} {sentences[i]}", start=len(sentences[i - 1]) + 1)
            if found is None:
                continue
            text, noun, others = found
            split = ctx.split(f"{doc_id}#{i // WSC_BLOCK}")
            out[split].append(_row(text, wsc_question("it", noun), 1))
            for other in ctx.rng.sample(others, min(WSC_MAX_FALSE, len(others))):
                out[split].append(_row(text, wsc_question("it", other), 0))
    return out
