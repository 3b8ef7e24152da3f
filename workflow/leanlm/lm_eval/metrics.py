"""lm-evaluation-harness's metric names in the project's metric registry (params/tasks/lm_eval.yaml).

Ch. 4's scores are computed by lm-eval itself (leanlm.runners.lm_eval reads them from its
results); registering the names lets the task table declare them, validated like every other metric,
and gives each the same definition lm-eval aggregates with, so the numbers can be recomputed from
per-document scores:

- ``acc`` / ``acc_norm``: accuracy of the chosen option (``acc_norm`` chooses by log-likelihood per
  byte of the option; the choice is made before scoring, so both are plain accuracy here);
- ``word_perplexity`` / ``byte_perplexity``: ``exp(sum NLL / sum units)`` over documents, with per-document
  summed NLLs (nats) as predictions and words / UTF-8 bytes as references (lm-eval's
  ``weighted_perplexity``);
- ``bits_per_byte``: ``sum NLL / sum bytes / ln 2``.

``perplexity`` (LAMBADA's, ``exp`` of the mean per-document NLL) is the registered one of
:mod:`leanlm.evaluation.perplexity` with one unit per document.
"""

from __future__ import annotations

import math

import numpy as np

from leanlm.errors import DataError
from leanlm.evaluation.metrics import METRICS, accuracy


@METRICS.register("acc")
def acc(predictions: np.ndarray, references: np.ndarray) -> float:
    """lm-eval's ``acc``: the fraction of questions whose highest-likelihood option is the gold one."""
    return accuracy(predictions, references)


@METRICS.register("acc_norm")
def acc_norm(predictions: np.ndarray, references: np.ndarray) -> float:
    """lm-eval's ``acc_norm``: accuracy when options are chosen by log-likelihood per byte."""
    return accuracy(predictions, references)


def _pooled(predictions: np.ndarray, references: np.ndarray, what: str) -> tuple[float, float]:
    nll = float(np.sum(np.asarray(predictions, dtype=np.float64)))
    units = float(np.sum(np.asarray(references, dtype=np.float64)))
    if units <= 0:
        raise DataError(f"{what}: the documents have no {what.split('_')[0]}s (the unit counts sum to 0)")
    return nll, units


@METRICS.register("word_perplexity")
def word_perplexity(predictions: np.ndarray, references: np.ndarray) -> float:
    """``exp(sum NLL / sum words)`` of per-document NLLs (predictions) and word counts (references)."""
    nll, words = _pooled(predictions, references, "word_perplexity")
    return math.exp(nll / words)


@METRICS.register("byte_perplexity")
def byte_perplexity(predictions: np.ndarray, references: np.ndarray) -> float:
    """``exp(sum NLL / sum bytes)`` of per-document NLLs and UTF-8 byte counts."""
    nll, n_bytes = _pooled(predictions, references, "byte_perplexity")
    return math.exp(nll / n_bytes)


@METRICS.register("bits_per_byte")
def bits_per_byte(predictions: np.ndarray, references: np.ndarray) -> float:
    """``sum NLL / sum bytes / ln 2`` of per-document NLLs and UTF-8 byte counts."""
    nll, n_bytes = _pooled(predictions, references, "byte_perplexity")
    return nll / n_bytes / math.log(2)
