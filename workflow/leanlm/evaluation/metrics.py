"""Task metrics, by the names the thesis's tasks use (Appendix 3.8: accuracy, F1, Matthews, Spearman).

Each metric is a thin wrapper over scikit-learn or scipy, so the numbers are the ones every GLUE
leaderboard computes. Values are fractions (0..1) or correlations (-1..1); tables multiply by 100.

    >>> compute("accuracy", [1, 0, 1], [1, 1, 1])
    0.6666666666666666
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Callable, Iterable, Sequence

import numpy as np

from leanlm.errors import ConfigError, DataError
from leanlm.registry import Registry

def skm():
    """scikit-learn's metrics module, imported on first use: every job validates metric names through
    this registry at start-up, and importing scikit-learn and SciPy there cost ~1.5 s a job."""
    from sklearn import metrics

    return metrics


def _stats():
    from scipy import stats

    return stats


MetricFn = Callable[[np.ndarray, np.ndarray], float]
METRICS: Registry[MetricFn] = Registry("metric")


@METRICS.register("accuracy")
def accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    """Fraction of exact matches (MNLI matched, QNLI, RTE, SST, ...)."""
    return float(skm().accuracy_score(references, predictions))


@METRICS.register("f1")
def f1(predictions: np.ndarray, references: np.ndarray) -> float:
    """Binary F1 of the positive class 1 (QQP, MRPC): GLUE's convention."""
    # zero_division=0: a model that never predicts the positive class scores 0, without a warning.
    return float(skm().f1_score(references, predictions, pos_label=1, average="binary", zero_division=0))


@METRICS.register("matthews")
def matthews(predictions: np.ndarray, references: np.ndarray) -> float:
    """Matthews correlation coefficient (CoLA); 0 when undefined (a constant prediction)."""
    return float(skm().matthews_corrcoef(references, predictions))


def _correlation(fn, predictions: np.ndarray, references: np.ndarray) -> float:
    # A constant prediction has no defined correlation (scipy returns NaN with a warning). Score it 0,
    # as scikit-learn does for Matthews: an average over tasks then stays a number, and a model that
    # learned nothing is not rewarded.
    if np.ptp(predictions) == 0 or np.ptp(references) == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _stats().ConstantInputWarning)
        value = float(fn(predictions, references)[0])
    return 0.0 if math.isnan(value) else value


@METRICS.register("spearman")
def spearman(predictions: np.ndarray, references: np.ndarray) -> float:
    """Spearman rank correlation (STS-B), ties given their average rank."""
    return _correlation(_stats().spearmanr, predictions, references)


@METRICS.register("pearson")
def pearson(predictions: np.ndarray, references: np.ndarray) -> float:
    """Pearson correlation (STS-B's second metric)."""
    return _correlation(_stats().pearsonr, predictions, references)


def _as_array(values: Iterable, what: str, metric: str) -> np.ndarray:
    array = np.asarray(values if hasattr(values, "__len__") else list(values))
    if array.ndim != 1:
        raise DataError(
            f"metric {metric!r}: {what} must be a flat sequence of labels or scores, got shape {array.shape}; "
            "take the argmax of logits before scoring"
        )
    return array


def compute(metric_name: str, predictions: Sequence, references: Sequence) -> float:
    """Score ``predictions`` against ``references`` with the metric called ``metric_name``.

    Raises :class:`ConfigError` for an unknown metric name and :class:`DataError` when the two
    sequences are empty or of different lengths.
    """
    fn = METRICS.get(metric_name)  # ConfigError naming the known metrics
    preds = _as_array(predictions, "predictions", metric_name)
    refs = _as_array(references, "references", metric_name)
    if len(preds) != len(refs):
        raise DataError(
            f"metric {metric_name!r}: {len(preds)} predictions but {len(refs)} references; "
            "score each example exactly once"
        )
    if len(preds) == 0:
        raise DataError(f"metric {metric_name!r}: no examples to score (empty evaluation set)")
    return fn(preds, refs)


def compute_all(names: Iterable[str], predictions: Sequence, references: Sequence) -> dict[str, float]:
    """Every metric in ``names`` on the same predictions, as ``{name: value}`` in the given order."""
    return {name: compute(name, predictions, references) for name in names}


# Metrics of other task shapes live beside their task code and register into METRICS on import.
METRIC_MODULES = ("leanlm.evaluation.squad", "leanlm.evaluation.superglue_metrics",
                  "leanlm.evaluation.bleu", "leanlm.evaluation.perplexity",
                  "leanlm.lm_eval.metrics")
# The direction of every metric a table or a claim can name, declared here and nowhere else. Lower is
# better: PRR/PEoP use the inverse formulas, tables bold the minimum, claims turn "better" into "lower",
# and the value is printed as it is (not x 100). An undeclared metric is an error (:func:`lower_is_better`):
# a default direction once read "perplexity_ctx128" as higher-is-better and flipped a claim's 12 parts.
LOWER_IS_BETTER = frozenset({"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"})
HIGHER_IS_BETTER = frozenset({"acc", "acc_norm", "accuracy", "f1", "macro_f1", "f1a", "matthews", "pearson",
                              "spearman", "squad_f1", "squad_em", "group_em", "bleu"})
# Families of metrics named with a number: the analysis runner's perplexity at each context length.
LOWER_IS_BETTER_PATTERN = re.compile(r"^perplexity_ctx\d+$")


def lower_is_better(metric: str) -> bool:
    """Whether lower values of ``metric`` are better; ConfigError for a metric with no declared direction."""
    if metric in LOWER_IS_BETTER or LOWER_IS_BETTER_PATTERN.match(metric):
        return True
    if metric in HIGHER_IS_BETTER:
        return False
    raise ConfigError(f"metric {metric!r} has no declared direction: add it to HIGHER_IS_BETTER or LOWER_IS_BETTER "
                      f"in leanlm/evaluation/metrics.py before a table or claim compares it")


def import_metric_modules() -> None:
    import importlib

    for module in METRIC_MODULES:  # a missing module fails loudly: no metric is silently dropped
        importlib.import_module(module)
