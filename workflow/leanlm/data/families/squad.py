"""SQuAD v1.1 / v2.0's hub loader (rajpurkar/squad, rajpurkar/squad_v2; params/tasks/squad.yaml); the
packaged cloze stand-ins are beside it (:mod:`leanlm.data.families.squad_standins`), both named by
:data:`FAMILY`.

Rows are span-QA rows (leanlm.data.tasks): ``{idx, context, question, answers: {text: [...],
answer_start: [...]}}``, empty lists for an unanswerable question (v2.0).

"validation" is the SQuAD dev set, where the thesis reports (Table 3.1); SQuAD's test set is hidden, so
"test" is a held-out slice of train, chosen by hashing the seed, the task and the article title (all
questions on one article stay together), and "train" is the rest. ``idx`` is the row's position in its
hub split. Schema mapping (:func:`map_squad_rows`, :func:`squad_task_splits`) is apart from downloading
(:func:`load_squad`).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from leanlm.data.task_sources import TaskFamily
from leanlm.data.tasks import TaskSpec
from leanlm.errors import DataError


def map_squad_rows(spec: TaskSpec, rows: Iterable[Mapping[str, Any]]) -> tuple[list[dict], dict]:
    """Hub rows (id, title, context, question, answers{text, answer_start}) -> span-QA rows.

    ``idx`` is the position in the split; the row's ``title`` is returned alongside for the held-out
    split. A gold answer whose offset is off is moved to the nearest occurrence of its text, or
    dropped when the text is not in the context (counted). Questions lose leading whitespace (some
    SQuAD questions have long runs of it); contexts and answers are kept verbatim.
    """
    out, counts = [], {"answers_moved": 0, "answers_dropped": 0}
    for position, row in enumerate(rows):
        try:
            context, question, answers = row["context"], row["question"], row["answers"]
        except KeyError as err:
            raise DataError(f"{spec.hub['dataset']} rows need the columns context, question and answers "
                            f"(params/tasks/squad.yaml, key {spec.family}.{spec.name}.hub); missing {err}; "
                            f"columns: {', '.join(row)}") from None
        texts, starts = [], []
        for text, start in zip(answers["text"], answers["answer_start"]):
            start = int(start)
            if context[start : start + len(text)] != text:
                found = [m.start() for m in re.finditer(re.escape(text), context)] if text else []
                if not found:
                    counts["answers_dropped"] += 1
                    continue
                start = min(found, key=lambda s: abs(s - start))
                counts["answers_moved"] += 1
            texts.append(text)
            starts.append(start)
        if answers["text"] and not texts:
            continue  # an answerable question none of whose answers is in its context: unusable
        out.append({"idx": position, "title": str(row.get("title", "")), "context": context,
                    "question": question.lstrip(), "answers": {"text": texts, "answer_start": starts}})
    return out, counts


def squad_task_splits(spec: TaskSpec, dataset: Mapping[str, Iterable[Mapping[str, Any]]], seed: int,
                      heldout_fraction: float) -> tuple[dict, dict]:
    """train/validation/test rows of one SQuAD version from a hub ``DatasetDict`` (or dict of row lists).

    As the thesis, train is the full official train split (``heldout_fraction`` 0) and test is empty;
    a fraction above 0 holds out that share of train's articles (by title) as test."""
    from leanlm.data.sources.hub import check_heldout_fraction, heldout_provenance, is_held_out

    fraction = check_heldout_fraction(heldout_fraction)
    hub = spec.hub
    for split in (hub["train"], hub["validation"]):
        if split not in dataset:
            raise DataError(f"{hub['dataset']} has no split {split!r}; splits: {', '.join(dataset)}")
    train_rows, train_counts = map_squad_rows(spec, dataset[hub["train"]])
    validation, validation_counts = map_squad_rows(spec, dataset[hub["validation"]])
    splits: dict[str, list[dict]] = {"train": [], "validation": validation, "test": []}
    for row in train_rows:
        unit = row["title"] or row["context"]
        splits["test" if is_held_out(seed, spec.name, unit, fraction) else "train"].append(row)
    for rows in splits.values():
        for row in rows:
            del row["title"]
    provenance = {
        "dataset": hub["dataset"],
        "config": hub.get("config"),
        **heldout_provenance(hub["train"], fraction, "article title", "SQuAD"),
        "validation": hub["validation"],
        **{k: train_counts[k] + validation_counts[k] for k in train_counts},
    }
    return splits, provenance


def load_squad(spec: TaskSpec, profile: str):
    """Download (or reuse the ``datasets`` cache of) one SQuAD version: a ``DatasetDict`` in the hub schema."""
    from leanlm.data.sources.hub import ensure_hub_reachable
    from leanlm.data.plumbing.mirror import mirrored_dataset

    mirrored = mirrored_dataset(spec.hub["dataset"], spec.hub.get("config"), profile)
    if mirrored is not None:
        return mirrored
    what = spec.hub["dataset"]
    ensure_hub_reachable(what, profile)
    import datasets

    try:
        return datasets.load_dataset(spec.hub["dataset"], spec.hub.get("config"))
    except Exception as exc:  # datasets raises many types (HTTP, FileNotFound, DatasetNotFound)
        raise DataError(f"could not load {what} from the Hugging Face hub: {exc}") from exc


def load_squad_family(spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    return squad_task_splits(spec, load_squad(spec, profile), seed, heldout_fraction)


FAMILY = TaskFamily("squad", standins="leanlm.data.families.squad_standins:STANDINS", hub=load_squad_family)
