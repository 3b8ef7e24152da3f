"""SuperGLUE's metrics beyond accuracy and binary F1 (Appendix 3.8; Wang et al., 2019).

- ``macro_f1`` (CB): the unweighted mean of the per-class F1 scores, so the rare "neutral" class
  (6% of CB) weighs as much as the other two;
- ``f1a`` (MultiRC): binary F1 over all answer options, each (question, answer) judged on its own;
- ``group_em`` (MultiRC): exact match per question, i.e. the fraction of questions whose answer
  options are *all* labelled correctly.

How groups reach a metric: metric functions take two flat arrays, so the runner passes, for tasks
whose rows carry ``group`` (MultiRC's question id), object arrays of ``(group, value)`` pairs built
by :func:`attach_groups` (the classification runner does so for every grouped task). ``f1a``
accepts both plain labels and such pairs; ``group_em`` needs the pairs.

    >>> refs = attach_groups([{"group": "q1"}, {"group": "q1"}, {"group": "q2"}], [1, 0, 1])
    >>> preds = attach_groups([{"group": "q1"}, {"group": "q1"}, {"group": "q2"}], [1, 1, 1])
    >>> group_em(preds, refs)   # q1 has a wrong option, q2 is right
    0.5
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from leanlm.errors import DataError
from leanlm.evaluation.metrics import METRICS, skm


def attach_groups(rows: Sequence[dict], values: Sequence) -> np.ndarray | list:
    """``values`` paired with their rows' ``group`` as a 1-D object array of ``(group, value)``;
    ``values`` unchanged (as a list) when no row carries a group. Rows must all have one or none."""
    grouped = ["group" in row for row in rows]
    if not any(grouped):
        return list(values)
    if not all(grouped):
        raise DataError(f"{grouped.count(False)} of {len(rows)} rows carry no 'group' while the others "
                        "do; a grouped task (MultiRC) needs the question id on every row")
    if len(rows) != len(values):
        raise DataError(f"{len(values)} values for {len(rows)} rows; score each row exactly once")
    out = np.empty(len(rows), dtype=object)  # filled one by one so numpy keeps it 1-D
    for i, (row, value) in enumerate(zip(rows, values)):
        out[i] = (row["group"], value)
    return out


def _is_grouped(values: np.ndarray) -> bool:
    return values.dtype == object and len(values) > 0 and isinstance(values[0], tuple)


def _split_groups(predictions: np.ndarray, references: np.ndarray, metric: str):
    """(groups, predicted labels, reference labels) from two arrays of (group, label) pairs."""
    if not (_is_grouped(predictions) and _is_grouped(references)):
        raise DataError(f"metric {metric!r} needs (group, label) pairs for predictions and references "
                        "(leanlm.evaluation.superglue_metrics.attach_groups); the task's rows carry no "
                        "'group' (MultiRC's question id)")
    groups = [g for g, _ in references]
    if [g for g, _ in predictions] != groups:
        raise DataError(f"metric {metric!r}: predictions and references list different groups; "
                        "pair both with the same rows, in the same order")
    return groups, np.array([int(v) for _, v in predictions]), np.array([int(v) for _, v in references])


def _labels(values: np.ndarray) -> np.ndarray:
    return np.array([int(v) for _, v in values]) if _is_grouped(values) else values


@METRICS.register("macro_f1")
def macro_f1(predictions: np.ndarray, references: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes seen in either array (CB)."""
    return float(skm().f1_score(_labels(references), _labels(predictions), average="macro", zero_division=0))


@METRICS.register("f1a")
def f1a(predictions: np.ndarray, references: np.ndarray) -> float:
    """Binary F1 of the "true" class (1) over all answer options (MultiRC's F1a)."""
    return float(skm().f1_score(_labels(references), _labels(predictions), pos_label=1, average="binary",
                              zero_division=0))


@METRICS.register("group_em")
def group_em(predictions: np.ndarray, references: np.ndarray) -> float:
    """Fraction of groups (MultiRC questions) whose every answer option is predicted right."""
    groups, preds, refs = _split_groups(predictions, references, "group_em")
    all_right: dict = defaultdict(lambda: True)
    for group, ok in zip(groups, preds == refs):
        all_right[group] = all_right[group] and bool(ok)
    return sum(all_right.values()) / len(all_right)
