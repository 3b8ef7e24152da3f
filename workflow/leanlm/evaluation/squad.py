"""SQuAD's official metrics: token F1 and exact match after answer normalisation (Appendix 3.8).

The thesis reports F1 on the SQuAD v1.1 and v2.0 dev sets (§3.4.5, Table 3.1). The rules are those
of the official evaluation scripts (Rajpurkar et al., 2016, 2018), written here from their
definitions:

- normalisation: lowercase, drop ASCII punctuation, drop the articles a / an / the, collapse
  whitespace;
- exact match: the normalised prediction equals a normalised gold answer;
- F1: harmonic mean of token precision and recall (tokens counted with multiplicity, as a bag);
- each question scores its best gold answer (the max over golds), and the corpus score is the mean;
- v2.0: an unanswerable question has the single gold answer "" (no answer); if the prediction or
  the gold normalises to no tokens, F1 is 1 when both do and 0 otherwise. Predicting "" for an
  unanswerable question therefore scores 1, any text scores 0.

The v2.0 rule is a strict superset of v1.1's (v1.1 never has empty golds; the only difference, a
gold made only of articles and punctuation, does not occur in practice), so one function serves both.

Registered metrics take ``predictions``: predicted answer strings ("" = no answer), and
``references``: one list of gold answer strings per question (empty list = unanswerable), as
numpy object arrays (:func:`as_references` builds one), and return a fraction in 0..1.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from leanlm.errors import DataError
from leanlm.evaluation.metrics import METRICS

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop articles, collapse whitespace (the official order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of one prediction against one gold answer (bag-of-tokens overlap)."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        # No-answer on either side (v2.0): right only when both are empty.
        return float(predicted == wanted)
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(score, prediction: str, golds: Sequence[str]) -> float:
    """``score`` against the best gold answer; an empty gold list means "no answer" (v2.0)."""
    golds = list(golds) or [""]
    return max(score(prediction, gold) for gold in golds)


def as_references(golds: Iterable[Sequence[str]]) -> np.ndarray:
    """A 1-D object array holding one list of gold answers per question (what the metrics take)."""
    golds = [list(g) for g in golds]
    out = np.empty(len(golds), dtype=object)
    for i, answers in enumerate(golds):
        out[i] = answers
    return out


def _mean_over_questions(score, predictions: np.ndarray, references: np.ndarray, metric: str) -> float:
    total = 0.0
    for prediction, golds in zip(predictions, references):
        if not isinstance(golds, (list, tuple, np.ndarray)) or not all(isinstance(g, str) for g in golds):
            raise DataError(f"metric {metric!r}: each reference must be a list of gold answer strings "
                            f"(empty = unanswerable), got {golds!r}; build them with as_references()")
        total += best_over_golds(score, str(prediction), golds)
    return total / len(predictions)


@METRICS.register("squad_f1")
def squad_f1(predictions: np.ndarray, references: np.ndarray) -> float:
    """Mean over questions of the best token F1 against the gold answers (the thesis's SQuAD score)."""
    return _mean_over_questions(f1_score, predictions, references, "squad_f1")


@METRICS.register("squad_em")
def squad_em(predictions: np.ndarray, references: np.ndarray) -> float:
    """Mean over questions of exact match with any gold answer after normalisation."""
    return _mean_over_questions(exact_match_score, predictions, references, "squad_em")
