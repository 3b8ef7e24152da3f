"""Per-example statistics vectorised over bootstrap draws, for :mod:`leanlm.claims.stats`.

Each takes the per-example arrays of one evaluation and an index matrix ``idx`` of shape (draws, n), and
returns the metric for every draw, shape (draws,); ``idx = arange(n)[None]`` gives the observed value.
:data:`STATISTICS` names them (a :class:`~leanlm.claims.stats.SeedScores`' ``statistic``), :data:`FIELDS` the
per-example arrays each reads (:data:`PAIR_FIELDS` for the metrics recomputed from predictions and
references). Pure functions of numpy arrays.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np


def _mean(data: Mapping[str, np.ndarray], idx: np.ndarray) -> np.ndarray:
    return data["score"][idx].mean(axis=1)


def _median(data: Mapping[str, np.ndarray], idx: np.ndarray) -> np.ndarray:
    """The median of per-example values: a time per sample over timing rounds (leanlm.claims.speed)."""
    return np.median(data["score"][idx], axis=1)


def _perplexity(data: Mapping[str, np.ndarray], idx: np.ndarray) -> np.ndarray:
    """exp(total negative log-likelihood / total units): documents are resampled whole."""
    return np.exp(data["nll"][idx].sum(axis=1) / data["units"][idx].sum(axis=1))


def _confusion(data, idx):
    pred, ref = data["prediction"][idx], data["reference"][idx]
    tp = ((pred == 1) & (ref == 1)).sum(axis=1).astype(float)
    fp = ((pred == 1) & (ref != 1)).sum(axis=1).astype(float)
    fn = ((pred != 1) & (ref == 1)).sum(axis=1).astype(float)
    tn = ((pred != 1) & (ref != 1)).sum(axis=1).astype(float)
    return tp, fp, fn, tn


def _accuracy(data, idx):
    # Each example's correctness once, then one gather per draw row (not two gathers and a comparison).
    correct = (np.asarray(data["prediction"]) == np.asarray(data["reference"])).astype(np.float32)
    return correct[idx].mean(axis=1, dtype=np.float64)


def _f1(data, idx):
    """Binary F1 of class 1, 0 where undefined (scikit-learn's zero_division=0)."""
    tp, fp, fn, _ = _confusion(data, idx)
    denom = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def _macro_f1(data, idx):
    """Unweighted mean of per-class F1 over the classes present in the draw's references or predictions
    (scikit-learn's average="macro"), 0 for a class never predicted nor present."""
    pred, ref = data["prediction"][idx], data["reference"][idx]
    classes = np.union1d(np.unique(data["prediction"]), np.unique(data["reference"]))
    total = np.zeros(idx.shape[0])
    present = np.zeros(idx.shape[0])
    for c in classes:
        tp = ((pred == c) & (ref == c)).sum(axis=1)
        denom = (pred == c).sum(axis=1) + (ref == c).sum(axis=1)
        seen = denom > 0
        total += np.where(seen, 2 * tp / np.where(seen, denom, 1), 0.0)
        present += seen
    return total / np.maximum(present, 1)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    denom = np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (x * y).sum(axis=1) / np.where(denom > 0, denom, 1), 0.0)


def _ranks_rows(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank) of each row, as scipy.stats.rankdata."""
    order = np.argsort(x, axis=1, kind="stable")
    sorted_x = np.take_along_axis(x, order, axis=1)
    # Each sorted position's tie group, as the 0-based positions of its first and last member, for all rows
    # at once (a loop over the rows, with np.unique's run lengths, took most of the claims stage's time at
    # the many draws a claim of many parts needs): a tie group of positions start..end shares the rank
    # (start + end) / 2 + 1.
    n = sorted_x.shape[1]
    position = np.broadcast_to(np.arange(n), sorted_x.shape)
    first = np.ones(sorted_x.shape, dtype=bool)
    first[:, 1:] = sorted_x[:, 1:] != sorted_x[:, :-1]
    last = np.ones(sorted_x.shape, dtype=bool)
    last[:, :-1] = first[:, 1:]
    start = np.maximum.accumulate(np.where(first, position, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, position, n)[:, ::-1], axis=1)[:, ::-1]
    ranks_sorted = (start + end) / 2.0 + 1.0
    ranks = np.empty_like(ranks_sorted)
    np.put_along_axis(ranks, order, ranks_sorted, axis=1)
    return ranks


def _matthews(data, idx):
    """Matthews correlation of binary labels; 0 where undefined (a constant prediction)."""
    pred, ref = data["prediction"][idx].astype(float), data["reference"][idx].astype(float)
    if set(np.unique(data["reference"])) - {0, 1} or set(np.unique(data["prediction"])) - {0, 1}:
        return _multiclass_matthews(data, idx)
    return _pearson_rows(pred, ref)


def _multiclass_matthews(data, idx):
    from sklearn.metrics import matthews_corrcoef

    return np.array([matthews_corrcoef(data["reference"][i], data["prediction"][i]) for i in idx])


def _pearson(data, idx):
    return _pearson_rows(data["prediction"][idx].astype(float), data["reference"][idx].astype(float))


def _spearman(data, idx):
    pred, ref = data["prediction"][idx].astype(float), data["reference"][idx].astype(float)
    return _pearson_rows(_ranks_rows(pred), _ranks_rows(ref))


def _bleu(data, idx):
    """Corpus BLEU (0..1) of each draw's sentences from their summed sacrebleu statistics."""
    from leanlm.evaluation.bleu import STAT_FIELDS, bleu_from_statistics

    sums = np.stack([data[f][idx].sum(axis=1) for f in STAT_FIELDS], axis=1)  # (draws, fields)
    return np.array([bleu_from_statistics(row.tolist()) for row in sums])


STATISTICS: dict[str, Callable[[Mapping[str, np.ndarray], np.ndarray], np.ndarray]] = {
    "mean": _mean,            # per-example scores (correctness, EM, F1 of a question, lm-eval acc)
    "median": _median,        # per-round times per sample (ch. 2's pretraining speed)
    "perplexity": _perplexity,  # per-document negative log-likelihood and units (tokens, words)
    "accuracy": _accuracy,    # predictions and references: the metric recomputed on the draw
    "f1": _f1,
    "macro_f1": _macro_f1,
    "matthews": _matthews,
    "pearson": _pearson,
    "spearman": _spearman,
    "bleu": _bleu,            # per-sentence n-gram statistics (leanlm.evaluation.bleu.STAT_FIELDS)
}
BLEU_FIELDS = ("hyp_len", "ref_len", "correct_1", "correct_2", "correct_3", "correct_4",
               "total_1", "total_2", "total_3", "total_4")
FIELDS = {"mean": ("score",), "median": ("score",), "perplexity": ("nll", "units"), "bleu": BLEU_FIELDS}
PAIR_FIELDS = ("prediction", "reference")
