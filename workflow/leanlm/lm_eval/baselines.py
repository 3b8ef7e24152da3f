"""Table 4.1's "Rnd. Guess" and "Majority" rows, computed from the documents lm-eval evaluates.

The rows are never typed in: :func:`task_baselines` takes an lm-eval ``Task`` (a local stand-in or a hub
task, built exactly as the evaluation builds it), the documents the evaluation reads (the first
``limit``, as lm-eval's ``limit`` does) and turns each into the shape
:func:`random_guess_and_majority` scores:

- multiple choice: the options (``doc_to_choice``) and the gold index (``doc_to_target``); random guess
  = mean 1 / #options, majority = always answering the most frequent gold index;
- rolling log-likelihood (WikiText): the scored text; random guess = a uniform distribution over the
  tokenizer's vocabulary, as word/byte perplexity and bits per byte; no majority row;
- log-likelihood (LAMBADA): context + continuation, the continuation being " " + the last word;
  random guess as perplexity and accuracy of a uniform distribution; no majority row.

Every lm_eval run records them beside its scores (``results[i].baselines``; the same for every run of
a profile, since they depend only on the tasks, the limit and the tokenizer). :func:`collect_baselines`
(called by aggregation) writes the profile's ``results/<profile>/baselines/lm_eval.json``:
``{"profile", "tasks": {task: {lm_eval_task, thesis_name, output_type, split, examples, random_guess,
majority}}}`` with accuracies as fractions.

Note: lm-eval's ``sciq`` always puts the gold answer last, so its majority row is 100% (the thesis
prints 25.0, the rate of a randomly placed answer); the packaged stand-ins draw the gold position at
random.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import yaml

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import load_yaml, read_jsonl, write_json

log = logging.getLogger(__name__)

BASELINES_FILE = "lm_eval.json"  # results/<profile>/baselines/lm_eval.json


def load_lm_eval_tasks(names: list[str], include_path) -> dict[str, Any]:
    """lm-eval ``Task`` objects by name, built as :func:`run_lm_eval` builds them (``include_path``: the
    :data:`leanlm.lm_eval.adapter.TaskSource` of the evaluation)."""
    from leanlm.lm_eval.adapter import _task_specs, task_manager

    specs, needs_defaults = _task_specs(list(names), include_path)
    return task_manager(needs_defaults).load(specs)["tasks"]


def evaluated_docs(task, limit: int | float | None = None) -> list[dict]:
    """The documents lm-eval scores with ``limit``: all, the first ``limit`` (an int), or the first
    ``ceil(limit * n)`` (a fraction below 1)."""
    docs = list(task.eval_docs)
    if limit is None:
        return docs
    count = int(math.ceil(len(docs) * limit)) if limit < 1.0 else int(limit)
    return docs[:count]


def evaluated_split(task) -> str:
    return task.config.test_split if task.has_test_docs() else task.config.validation_split


def _gold_index(target, choices: list[str], task_name: str) -> int:
    if isinstance(target, (list, tuple)):
        target = target[0]
    if isinstance(target, str):
        if target in choices:
            return choices.index(target)
        if target.strip().isdigit():
            return int(target)
        raise DataError(f"lm-eval task {task_name}: gold answer {target!r} is none of its options {choices}")
    return int(target)


def baseline_rows(task, docs: list[dict]) -> list[dict]:
    """Documents in the shape random_guess_and_majority scores (see the module docstring)."""
    kind = task.config.output_type
    if kind == "multiple_choice":
        rows = []
        for doc in docs:
            choices = list(task.doc_to_choice(doc))
            rows.append({"choices": choices, "label": _gold_index(task.doc_to_target(doc), choices, task.config.task)})
        return rows
    if kind == "loglikelihood_rolling":
        return [{"page": task.doc_to_target(doc)} for doc in docs]
    if kind == "loglikelihood":
        rows = []
        for doc in docs:
            context, continuation = task.doc_to_text(doc), task.doc_to_target(doc)
            text = context + continuation
            if continuation != " " + text.split(" ")[-1]:
                raise DataError(f"lm-eval task {task.config.task}: the continuation {continuation!r} is not the last "
                                f"word after a space (LAMBADA's form); no random-guess row is defined for it")
            rows.append({"text": text})
        return rows
    raise DataError(f"lm-eval task {task.config.task}: output type {kind!r} has no Rnd. Guess / Majority rows")


def task_baselines(task, tokenizer, limit: int | float | None = None) -> dict:
    """The random-guess and majority rows of one lm-eval task over the documents it evaluates."""
    docs = evaluated_docs(task, limit)
    if not docs:
        raise DataError(f"lm-eval task {task.config.task} has no documents to evaluate")
    out = random_guess_and_majority(baseline_rows(task, docs), tokenizer)
    return {**out, "split": evaluated_split(task)}


def baselines_path(profile: str, experiment: str | None = None) -> Path:
    """results/<profile>/baselines/lm_eval.json (every run's), or <experiment>/lm_eval.json (its runs')."""
    folder = paths.results_dir(profile) / "baselines"
    return (folder / experiment if experiment else folder) / BASELINES_FILE


def collect_baselines(profile: str, experiment: str | None = None) -> Path | None:
    """Write results/<profile>/baselines/lm_eval.json from the runs' lm_eval.json records (None, and no
    file, when the profile has none); ``experiment``: from its runs only, into
    results/<profile>/baselines/<experiment>/lm_eval.json (what a table of that experiment reads). Runs
    must agree; a disagreeing one is reported and ignored."""
    runs = paths.results_dir(profile) / "runs"
    out = baselines_path(profile, experiment)
    pattern = f"{experiment}-*/{BASELINES_FILE}" if experiment else f"*/{BASELINES_FILE}"
    tasks: dict[str, dict] = {}
    source: dict[str, str] = {}
    for path in sorted(runs.glob(pattern)):
        record = json.loads(path.read_text(encoding="utf-8"))
        for result in record.get("results", []):
            row = {k: result.get(k) for k in ("lm_eval_task", "thesis_name")}
            row.update(result.get("baselines") or {})
            task = result["task"]
            if task not in tasks:
                tasks[task], source[task] = row, record.get("run_id", path.parent.name)
            elif row != tasks[task]:
                log.warning("%s: task %s's Rnd. Guess / Majority rows differ from run %s's (changed tasks or limit?); "
                            "keeping run %s's", path, task, source[task], source[task])
    if not tasks:
        if out.is_file():
            out.unlink()
        return None
    write_json(out, {"profile": profile, "tasks": tasks, "from_runs": source})
    return out


# ------------------------------------------------------------------ the rows, from a task's documents
def _load_task(task: str | Path) -> tuple[str, list[dict]]:
    path = Path(task)
    try:
        config = load_yaml(path.read_text(encoding="utf-8"))
        data = Path(config["dataset_kwargs"]["data_files"]["test"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise DataError(f"{path} is not a leanlm local lm-eval task ({err}); build it with build_lm_eval_tasks") from None
    return config["output_type"], read_jsonl(task_data_file(data, path))


def task_data_file(recorded: str | Path, yaml_path: Path) -> Path:
    """A task's data file as its YAML records it: relative to the YAML's folder (what the builder writes),
    or an absolute path of an older build, found beside the YAML when it is gone (moved or pulled)."""
    recorded = Path(recorded)
    if not recorded.is_absolute() or not recorded.is_file():
        return yaml_path.parent / (recorded if not recorded.is_absolute() else recorded.name)
    return recorded


def _output_type(docs: list[dict]) -> str:
    keys = set(docs[0]) if docs else set()
    if {"choices", "label"} <= keys:
        return "multiple_choice"
    if "page" in keys:
        return "loglikelihood_rolling"
    if "text" in keys:
        return "loglikelihood"
    raise DataError(f"cannot tell the task type of documents with keys {sorted(keys)}")


def random_guess_and_majority(task_yaml_or_docs: str | Path | list[dict], tokenizer=None) -> dict:
    """The Rnd. Guess and Majority rows of Table 4.1, computed from the task's own data.

    Multiple choice: random guess = mean of 1/(number of choices) (acc and acc_norm alike); majority =
    accuracy of always answering the most frequent gold position (= the majority class when every row
    has the same choices). Language modelling: the random guess is a uniform distribution over the
    tokenizer's vocabulary (needs ``tokenizer``; None without one), scored as lm-eval scores a model;
    there is no majority row ("-" in the thesis). Accuracies are fractions.
    """
    if isinstance(task_yaml_or_docs, (str, Path)):
        output_type, docs = _load_task(task_yaml_or_docs)
    else:
        docs = list(task_yaml_or_docs)
        output_type = _output_type(docs)
    if not docs:
        raise DataError("random_guess_and_majority: the task has no documents")
    out = {"output_type": output_type, "examples": len(docs), "random_guess": None, "majority": None}
    if output_type == "multiple_choice":
        chance = sum(1 / len(d["choices"]) for d in docs) / len(docs)
        labels = [int(d["label"]) for d in docs]
        majority = max(labels.count(v) for v in set(labels)) / len(labels)
        out["random_guess"] = {"acc": chance, "acc_norm": chance}
        out["majority"] = {"acc": majority, "acc_norm": majority}
        return out
    if tokenizer is None:
        return out
    log_v = math.log(tokenizer.get_vocab_size(with_added_tokens=True))

    def n_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    if output_type == "loglikelihood_rolling":
        nll = sum(n_tokens(d["page"]) for d in docs) * log_v
        words = sum(len(re.split(r"\s+", d["page"])) for d in docs)
        n_bytes = sum(len(d["page"].encode("utf-8")) for d in docs)
        out["random_guess"] = {"word_perplexity": math.exp(nll / words), "byte_perplexity": math.exp(nll / n_bytes),
                               "bits_per_byte": nll / n_bytes / math.log(2)}
    else:
        lengths = [n_tokens(" " + d["text"].split(" ")[-1]) for d in docs]
        out["random_guess"] = {"perplexity": math.exp(sum(lengths) * log_v / len(docs)),
                               "acc": sum(math.exp(-n * log_v) for n in lengths) / len(docs)}
    return out
