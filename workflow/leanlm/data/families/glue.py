"""GLUE's hub loader (DESIGN.md §5): one GLUE task from Hugging Face ``datasets``, mapped to our rows.

Its packaged stand-ins are beside it (:mod:`leanlm.data.families.glue_standins`), both named by
:data:`FAMILY` (:mod:`leanlm.data.task_sources`); the hub access it shares
with the other families (reachability, the mirror, held-out splits) is :mod:`leanlm.data.sources.hub`.

Schema mapping is kept apart from downloading: :func:`map_glue_rows` and :func:`glue_task_splits` take
rows in the hub's schema (a ``datasets.Dataset``, or any iterable of dicts), so tests feed them local
fixtures; only :func:`load_glue` touches the network (:func:`leanlm.data.sources.hub.load_hub_dataset`,
which fails at once when the hub is switched off or unreachable).

Splits: "validation" is GLUE's dev set (MNLI: validation_matched), where the thesis reports. As the
thesis, "train" is the full official train split and "test" is empty (``data.tasks.heldout_fraction``
0, the paper profile; DESIGN §8). GLUE's test labels are hidden, so a profile that wants a test score
sets a fraction (:data:`leanlm.data.sources.hub.HELDOUT_FRACTION` is the usual 10%): "test" is then
that slice of GLUE train, chosen by hashing the seed, the task and the row's idx, and "train" is the rest.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from leanlm.data.families.glue_standins import STANDINS
from leanlm.data.sources.hub import heldout_splits, load_hub_dataset, require_splits
from leanlm.data.task_sources import TaskFamily
from leanlm.data.tasks import TaskSpec
from leanlm.errors import DataError


def _column(row: Mapping[str, Any], column: str, spec: TaskSpec) -> Any:
    try:
        return row[column]
    except KeyError:
        raise DataError(
            f"{spec.hub['dataset']}/{spec.hub['config']} rows have no column {column!r} (params/tasks.yaml, "
            f"key {spec.family}.{spec.name}.hub); columns: {', '.join(row)}"
        ) from None


def map_glue_rows(spec: TaskSpec, rows: Iterable[Mapping[str, Any]]) -> tuple[list[dict], int]:
    """Hub rows -> ``{"idx", "text_a", "text_b", "label"}`` via the columns named in ``spec.hub``.

    Rows with label -1 (GLUE's hidden test labels) are dropped; returns (rows, number dropped).
    GLUE text is the benchmark and is kept verbatim.
    """
    hub = spec.hub
    out, hidden = [], 0
    for position, row in enumerate(rows):
        raw_label = _column(row, hub["label"], spec)
        if raw_label is None or (not spec.is_regression and int(raw_label) < 0):
            hidden += 1
            continue
        label = float(raw_label) if spec.is_regression else int(raw_label)
        if not spec.is_regression and label >= spec.num_labels:
            raise DataError(f"{hub['dataset']}/{hub['config']}: label {label} outside 0..{spec.num_labels - 1}")
        out.append({
            "idx": int(row["idx"]) if "idx" in row else position,
            "text_a": str(_column(row, hub["text_a"], spec)),
            "text_b": str(_column(row, hub["text_b"], spec)) if hub["text_b"] else None,
            "label": label,
        })
    return out, hidden


def glue_task_splits(spec: TaskSpec, dataset: Mapping[str, Iterable[Mapping[str, Any]]], seed: int,
                     heldout_fraction: float) -> tuple[dict, dict]:
    """train/validation/test rows of one GLUE task from a hub ``DatasetDict`` (or a dict of row lists).

    Returns (splits, provenance): where each split came from and how many hidden-label rows were dropped.
    ``heldout_fraction`` of train becomes "test" (0: none, the full official train split is trained on).
    """
    require_splits(spec, dataset)
    train_rows, hidden_train = map_glue_rows(spec, dataset[spec.hub["train"]])
    validation, hidden_validation = map_glue_rows(spec, dataset[spec.hub["validation"]])
    return heldout_splits(spec, [(row["idx"], row) for row in train_rows], validation, seed,
                          hidden_train + hidden_validation, unit="idx", benchmark="GLUE",
                          heldout_fraction=heldout_fraction)


def load_glue(spec: TaskSpec, profile: str):
    """One GLUE task from the hub (see :func:`load_hub_dataset`)."""
    return load_hub_dataset(spec, profile)


def load_glue_family(spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    return glue_task_splits(spec, load_glue(spec, profile), seed, heldout_fraction)


FAMILY = TaskFamily("glue", standins=STANDINS, hub=load_glue_family)
