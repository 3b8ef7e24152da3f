"""Corpus BLEU for translation (§3.4.5: "We use BLEU ... in WMT-14 English-to-German"), via sacrebleu.

sacrebleu computes the standard, comparable BLEU on detokenized text (its own "13a" tokenization,
exact-case, one reference per sentence): the score WMT reports. The metric returns it as a fraction
(sacrebleu's 0..100 score / 100) like the other metrics; tables multiply by 100.

    >>> round(compute("bleu", ["Das Haus ist klein."], ["Das Haus ist klein."]), 6)
    1.0
"""

from __future__ import annotations

import numpy as np
import sacrebleu

from leanlm.errors import DataError
from leanlm.evaluation.metrics import METRICS


def _strings(values: np.ndarray, what: str) -> list[str]:
    out = []
    for value in values.tolist():
        if not isinstance(value, str):
            raise DataError(f"metric 'bleu': {what} must be strings (detokenized sentences), got "
                            f"{type(value).__name__} {value!r:.80}; decode token ids before scoring")
        out.append(value)
    return out


def corpus_bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """(sacrebleu's corpus BLEU in 0..100, its signature: the settings, to report beside the score)."""
    metric = sacrebleu.BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return float(score.score), str(metric.get_signature())


@METRICS.register("bleu")
def bleu(predictions: np.ndarray, references: np.ndarray) -> float:
    """Corpus BLEU of hypotheses against one reference each, in 0..1 (sacrebleu's score / 100)."""
    score, _ = corpus_bleu(_strings(predictions, "predictions"), _strings(references, "references"))
    return score / 100.0


# Sentence-level sufficient statistics (sacrebleu's own, as its paired bootstrap uses them): corpus BLEU
# of any subset of sentences is BLEU of the summed statistics, so a claim's bootstrap resamples
# sentences without re-tokenising. Layout: hypothesis length, reference length, matches and totals of
# 1..4-grams.
STAT_FIELDS = ("hyp_len", "ref_len", "correct_1", "correct_2", "correct_3", "correct_4",
               "total_1", "total_2", "total_3", "total_4")


def sentence_statistics(hypotheses: list[str], references: list[str]) -> dict[str, list[int]]:
    """Per-sentence BLEU statistics, one list per field of :data:`STAT_FIELDS`."""
    metric = sacrebleu.BLEU()
    rows = metric._extract_corpus_statistics(hypotheses, [references])
    if rows and len(rows[0]) != len(STAT_FIELDS):
        raise DataError(f"sacrebleu's sentence statistics have {len(rows[0])} fields, not {len(STAT_FIELDS)}; "
                        "the pinned sacrebleu changed its layout")
    return {name: [int(r[i]) for r in rows] for i, name in enumerate(STAT_FIELDS)}


def bleu_from_statistics(sums: list[float]) -> float:
    """Corpus BLEU in 0..1 from statistics summed over sentences (the order of :data:`STAT_FIELDS`)."""
    return float(sacrebleu.BLEU()._compute_score_from_stats([int(round(v)) for v in sums]).score) / 100.0
