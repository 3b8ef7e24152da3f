"""SuperGLUE from the hub (aps/super_glue): each task's columns -> the pipeline's rows.

params/tasks/superglue.yaml says which rows each task becomes; the text templates that compose
them (WiC's "<word>: <sentence2>", MultiRC's "<question> <answer>", COPA's question sentences,
WSC's "Does <pronoun> refer to <noun>?") live here and are shared with the packaged stand-ins
(:mod:`leanlm.data.families.superglue_standins`, which imports them: :data:`FAMILY` names it by dotted
path), so both sources give the model the same input format.

Schema mapping (:func:`map_superglue_rows`, :func:`superglue_task_splits`) is kept apart from
downloading (:func:`load_superglue`), so tests feed local fixtures in the hub's schema. Splits
follow GLUE's policy (:mod:`leanlm.data.sources.hub`): "validation" = SuperGLUE's dev set, where the
thesis reports; "test" = a held-out slice of train, by a hash of the seed, the task and the unit
(the row's idx; for MultiRC the paragraph, so a paragraph's questions stay on one side).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from leanlm.data.sources import hub
from leanlm.data.task_sources import TaskFamily
from leanlm.data.tasks import TaskSpec
from leanlm.errors import DataError

# SuperGLUE's COPA "question" field, as a sentence (the wording of the SuperGLUE baselines).
COPA_QUESTIONS = {"cause": "What was the cause of this?", "effect": "What happened as a result?"}


def wic_second_text(word: str, sentence: str) -> str:
    """WiC's second segment: the target word in front of the second sentence."""
    return f"{word}: {sentence}"


def multirc_second_text(question: str, answer: str) -> str:
    """MultiRC's second segment: the question and one answer option."""
    return f"{question} {answer}"


def wsc_question(pronoun: str, noun: str) -> str:
    """WSC's second segment: whether the pronoun (span2) refers to the noun phrase (span1)."""
    return f"Does {pronoun} refer to {noun}?"


def _get(row: Mapping[str, Any], column: str, spec: TaskSpec) -> Any:
    try:
        return row[column]
    except KeyError:
        raise DataError(
            f"{spec.hub['dataset']}/{spec.hub['config']} rows have no column {column!r} "
            f"(params/tasks/superglue.yaml, key superglue.{spec.name}.hub); columns: {', '.join(row)}"
        ) from None


# Per task: hub row -> (pipeline row without idx/label, held-out unit). Columns come from spec.hub,
# plus the fixed extra columns each task's schema has (named in params/tasks/superglue.yaml).
Mapper = Callable[[TaskSpec, Mapping[str, Any]], tuple[dict, Any]]


def _pair(spec: TaskSpec, row: Mapping[str, Any]) -> tuple[dict, Any]:
    hub = spec.hub
    return {"text_a": str(_get(row, hub["text_a"], spec)), "text_b": str(_get(row, hub["text_b"], spec))}, None


def _wic(spec: TaskSpec, row: Mapping[str, Any]) -> tuple[dict, Any]:
    out, _ = _pair(spec, row)
    out["text_b"] = wic_second_text(str(_get(row, "word", spec)), out["text_b"])
    return out, None


def _multirc(spec: TaskSpec, row: Mapping[str, Any]) -> tuple[dict, Any]:
    out, _ = _pair(spec, row)
    out["text_b"] = multirc_second_text(out["text_b"], str(_get(row, "answer", spec)))
    idx = _get(row, "idx", spec)
    if not isinstance(idx, Mapping) or not {"paragraph", "question"} <= set(idx):
        raise DataError(f"{spec.hub['dataset']}/{spec.hub['config']}: idx {idx!r} is not "
                        "{paragraph, question, answer}; is this MultiRC's schema?")
    out["group"] = f"{idx['paragraph']}-{idx['question']}"
    return out, f"paragraph-{idx['paragraph']}"


def _wsc(spec: TaskSpec, row: Mapping[str, Any]) -> tuple[dict, Any]:
    pronoun, noun = str(_get(row, spec.hub["text_b"], spec)), str(_get(row, "span1_text", spec))
    return {"text_a": str(_get(row, spec.hub["text_a"], spec)), "text_b": wsc_question(pronoun, noun)}, None


def _copa(spec: TaskSpec, row: Mapping[str, Any]) -> tuple[dict, Any]:
    hub = spec.hub
    question = str(_get(row, hub["text_b"], spec))
    if question not in COPA_QUESTIONS:
        raise DataError(f"{hub['dataset']}/{hub['config']}: question {question!r} is neither "
                        f"{' nor '.join(map(repr, COPA_QUESTIONS))}")
    return {"text_a": str(_get(row, hub["text_a"], spec)), "text_b": COPA_QUESTIONS[question],
            "choices": [str(_get(row, c, spec)) for c in hub["choices"]]}, None


MAPPERS: dict[str, Mapper] = {"boolq": _pair, "cb": _pair, "sg_rte": _pair, "wic": _wic,
                              "multirc": _multirc, "copa": _copa, "wsc": _wsc}


def map_superglue_rows(spec: TaskSpec, rows: Iterable[Mapping[str, Any]]) -> tuple[list[tuple[Any, dict]], int]:
    """Hub rows -> ``(held-out unit, row)`` per labelled row, and the number of rows dropped for a
    hidden label (-1, SuperGLUE's test split). ``idx`` is the hub's idx (MultiRC: the position,
    its idx being a dict); the unit defaults to it."""
    if spec.name not in MAPPERS:
        raise DataError(f"task {spec.name!r} has no SuperGLUE schema mapping; known: {', '.join(MAPPERS)}")
    mapper, hub = MAPPERS[spec.name], spec.hub
    out, hidden = [], 0
    for position, row in enumerate(rows):
        raw_label = _get(row, hub["label"], spec)
        if raw_label is None or int(raw_label) < 0:
            hidden += 1
            continue
        label = int(raw_label)
        if label >= spec.num_labels:
            raise DataError(f"{hub['dataset']}/{hub['config']}: label {label} outside 0..{spec.num_labels - 1}")
        mapped, unit = mapper(spec, row)
        idx = row.get("idx")
        idx = int(idx) if isinstance(idx, int) else position
        out.append((idx if unit is None else unit, {"idx": idx, **mapped, "label": label}))
    return out, hidden


def superglue_task_splits(spec: TaskSpec, dataset: Mapping[str, Iterable[Mapping[str, Any]]],
                          seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    """train/validation/test rows of one SuperGLUE task from a hub ``DatasetDict`` (or a dict of
    row lists), and their provenance."""
    hub.require_splits(spec, dataset)
    train_rows, hidden_train = map_superglue_rows(spec, dataset[spec.hub["train"]])
    validation, hidden_validation = map_superglue_rows(spec, dataset[spec.hub["validation"]])
    unit = "paragraph" if spec.name == "multirc" else "idx"
    return hub.heldout_splits(spec, train_rows, [row for _, row in validation], seed,
                              hidden_train + hidden_validation, unit=unit, benchmark="SuperGLUE",
                              heldout_fraction=heldout_fraction)


def load_superglue(spec: TaskSpec, profile: str):
    """One SuperGLUE task from the hub, in the hub's schema (through the module, so a test's patch
    of ``hub.ensure_hub_reachable`` never sticks)."""
    return hub.load_hub_dataset(spec, profile)


def load_superglue_family(spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    return superglue_task_splits(spec, load_superglue(spec, profile), seed, heldout_fraction)


FAMILY = TaskFamily("superglue", standins="leanlm.data.families.superglue_standins:STANDINS",
                    hub=load_superglue_family)

