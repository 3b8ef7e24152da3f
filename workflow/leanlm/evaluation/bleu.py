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
