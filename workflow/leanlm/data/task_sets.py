"""Task sets on disk: tasks/<task>/{train,validation,test}.jsonl + META.json, for either source.

Rows follow the task's input shape (leanlm.data.tasks: GLUE-style rows are ``{"idx": int,
"text_a": str, "text_b": str | None, "label": int | float}``; multiple-choice, span-QA, seq2seq and
LM rows have their own keys, checked by :data:`ROW_KEYS`). Each split is
capped by ``data.tasks.max_train_examples`` (train) or ``max_eval_examples`` (validation, test) with
a seeded sample. Packaged rows are numbered 0..n-1 in their (seeded, shuffled) file order; hub rows
keep GLUE's own idx so they can be traced back.

META.json holds the spec, the source and provenance, and per split the row count and label
distribution (class counts; for regression, min/mean/max and a histogram over integer bins).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from pathlib import Path

from leanlm.data.splitting import SPLITS, seeded_sample
from leanlm.data.tasks import TaskSpec
from leanlm.errors import DataError
from leanlm.io import read_jsonl, write_json, write_jsonl


def cap_splits(rows: dict[str, list[dict]], max_train: int | None, max_eval: int | None,
               rng: random.Random, renumber: bool) -> dict[str, list[dict]]:
    """Seeded samples of each split within the caps; ``renumber`` gives idx 0..n-1 in file order."""
    out = {}
    for split in SPLITS:
        sample = seeded_sample(rows[split], max_train if split == "train" else max_eval, rng)
        if renumber:
            sample = [{"idx": i, **{k: v for k, v in r.items() if k != "idx"}} for i, r in enumerate(sample)]
        else:
            sample.sort(key=lambda r: r["idx"])
        out[split] = sample
    return out


def label_distribution(spec: TaskSpec, rows: list[dict]) -> dict:
    if spec.label_kind == "choice":
        counts = Counter(r["label"] for r in rows)
        return {f"choice_{i}": counts.get(i, 0) for i in range(spec.num_labels)}
    if spec.label_kind == "span":
        return {"answerable": sum(bool(r["answers"]["text"]) for r in rows),
                "unanswerable": sum(not r["answers"]["text"] for r in rows)}
    if spec.label_kind in ("text", "none"):
        return {}
    labels = [r["label"] for r in rows]
    if spec.is_regression:
        if not labels:
            return {}
        bins = Counter(min(int(v), 4) for v in labels)  # [0,1), [1,2), ..., [4,5]
        return {"min": min(labels), "max": max(labels), "mean": sum(labels) / len(labels),
                "histogram": {f"{b}-{b + 1}": bins.get(b, 0) for b in range(5)}}
    counts = Counter(labels)
    return {name: counts.get(i, 0) for i, name in enumerate(spec.label_names)}


# Required keys of a row per input shape; any row may also carry "group" (e.g. MultiRC's question).
ROW_KEYS = {
    "single": {"idx", "text_a", "text_b", "label"},
    "pair": {"idx", "text_a", "text_b", "label"},
    "multiple_choice": {"idx", "text_a", "text_b", "choices", "label"},
    "span_qa": {"idx", "context", "question", "answers"},
    "seq2seq": {"idx", "source", "target"},
    "lm": {"idx", "text"},
}
OPTIONAL_KEYS = {"group"}


def _check_other_shapes(spec: TaskSpec, split: str, row: dict) -> None:
    def bad(why: str) -> DataError:
        return DataError(f"task {spec.name} ({split}): {why}: {str(row)[:300]}")

    if spec.input_shape == "multiple_choice":
        choices = row["choices"]
        if not isinstance(choices, list) or len(choices) != spec.num_labels or not all(isinstance(c, str) and c for c in choices):
            raise bad(f"choices must be {spec.num_labels} non-empty strings")
        if not (isinstance(row["label"], int) and 0 <= row["label"] < spec.num_labels):
            raise bad(f"label must be the index of the right choice (0..{spec.num_labels - 1})")
    elif spec.input_shape == "span_qa":
        answers = row["answers"]
        if not (isinstance(row["context"], str) and row["context"] and isinstance(row["question"], str) and row["question"]):
            raise bad("context and question must be non-empty strings")
        if not isinstance(answers, dict) or set(answers) != {"text", "answer_start"} or len(answers["text"]) != len(answers["answer_start"]):
            raise bad("answers must be {text: [...], answer_start: [...]} of equal length")
        for text, start in zip(answers["text"], answers["answer_start"]):
            if row["context"][start : start + len(text)] != text:
                raise bad(f"answer {text!r} is not at offset {start} of the context")
    elif spec.input_shape == "seq2seq":
        if not (isinstance(row["source"], str) and row["source"] and isinstance(row["target"], str) and row["target"]):
            raise bad("source and target must be non-empty strings")
    elif spec.input_shape == "lm":
        if not (isinstance(row["text"], str) and row["text"]):
            raise bad("text must be a non-empty string")


def check_rows(spec: TaskSpec, split: str, rows: list[dict]) -> None:
    """The row contract, checked before anything is written (a builder bug fails here, loudly)."""
    required = ROW_KEYS[spec.input_shape]
    for row in rows:
        if not required <= set(row) or set(row) - required - OPTIONAL_KEYS:
            raise DataError(f"task {spec.name} ({split}): row keys {sorted(row)} are not the "
                            f"{spec.input_shape} row keys {sorted(required)} (+ optional {sorted(OPTIONAL_KEYS)})")
        if not spec.is_text_classification:
            _check_other_shapes(spec, split, row)
            continue
        if not isinstance(row["text_a"], str) or not row["text_a"]:
            raise DataError(f"task {spec.name} ({split}): malformed row {row!r}")
        if spec.is_pair != isinstance(row["text_b"], str):
            raise DataError(f"task {spec.name} ({split}): text_b must be {'a string' if spec.is_pair else 'null'}: {row!r}")
        label = row["label"]
        if spec.is_regression:
            if not isinstance(label, float):
                raise DataError(f"task {spec.name} ({split}): regression label must be a float: {row!r}")
        elif not (isinstance(label, int) and 0 <= label < spec.num_labels):
            raise DataError(f"task {spec.name} ({split}): label must be an int in 0..{spec.num_labels - 1}: {row!r}")


def write_task(out_dir: Path, spec: TaskSpec, rows: dict[str, list[dict]], source: str, provenance: dict) -> dict:
    """Write one task's three split files and META.json under ``out_dir/<task>/``; return the META."""
    task_dir = Path(out_dir) / spec.name
    for split in SPLITS:
        check_rows(spec, split, rows[split])
    for split in SPLITS:
        write_jsonl(task_dir / f"{split}.jsonl", rows[split])
    meta = {
        "task": spec.name,
        "source": source,
        "spec": dataclasses.asdict(spec),
        "provenance": provenance,
        "splits": {split: {"rows": len(rows[split]), "labels": label_distribution(spec, rows[split])}
                   for split in SPLITS},
    }
    write_json(task_dir / "META.json", meta)
    return meta


def read_task(data_dir: Path, task: str, split: str) -> list[dict]:
    """The rows of one split of a built task set (what fine-tuning reads)."""
    path = Path(data_dir) / "tasks" / task / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(f"{path} is missing; run the tasks stage (`leanlm data tasks --params ...`) first")
    return read_jsonl(path)
