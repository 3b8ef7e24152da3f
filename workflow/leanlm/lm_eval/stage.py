"""Where chapter 4's evaluation data comes from: the lm-eval tasks of the ``lm_eval`` and ``analysis``
families (both in params/tasks/lm_eval.yaml).

These families have no task sets of their own (``tasks/<task>/{train,validation,test}.jsonl``): lm-eval
reads its tasks itself. Which tasks it reads depends on the profile's source:

- ``hub`` (paper): the task's lm-eval name, ``hub.task`` in the task table (``arc_easy``, ``wikitext``,
  ...); lm-eval downloads its data at evaluation, or, when a hub mirror is set
  (:mod:`leanlm.data.plumbing.mirror`), runs the same task definitions on the mirror's copy of the data
  (:mod:`leanlm.lm_eval.mirror`). The tasks stage only writes ``tasks/lm_eval/MANIFEST.json``
  naming them (and, with a mirror, checks that it holds every split they read).
- ``packaged``: the local-JSON stand-in of that task (:data:`leanlm.lm_eval.standins.THESIS_TASKS`
  maps stand-ins to the tasks they stand in for), which the tasks stage writes to
  ``data/<profile>/tasks/lm_eval/`` (one YAML + JSONL per stand-in, and MANIFEST.json). The stand-ins
  are built from held-out text only: the documents of the corpus's test split, and for the BoolQ
  stand-in the movie-review snippets of that split with their human sentiment scores from the raw
  files (|score| >= 0.5, as the SST-2 stand-in).

:func:`lm_eval_task_name` and :func:`lm_eval_include` are what the runners use to find a task.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from leanlm import paths
from leanlm.lm_eval.standins import THESIS_TASKS, build_lm_eval_tasks
from leanlm.data.tasks import TaskSpec
from leanlm.errors import ConfigError, DataError
from leanlm.io import read_jsonl, write_json

log = logging.getLogger(__name__)

LM_EVAL_FAMILIES = ("lm_eval", "analysis")  # families whose data is lm-eval's tasks
LM_EVAL_DIR = "lm_eval"                     # data/<profile>/tasks/lm_eval/
HELDOUT_SPLIT = "test"                      # the corpus split the stand-ins are built from
SENTIMENT_BAND = 0.5                        # |score| below this is neither positive nor negative
UNCAPPED = 10**9                            # max_eval_examples: null keeps every example
STANDIN_OF = {thesis: standin for standin, thesis in THESIS_TASKS.items()}


def lm_eval_task_name(spec: TaskSpec, source: str) -> str:
    """The lm-eval task that evaluates ``spec`` under ``source``: its hub name, or the stand-in's."""
    hub_name = spec.hub.get("task")
    if not hub_name:
        raise ConfigError(f"task {spec.name!r} (family {spec.family}) needs hub.task, the lm-eval task name, in "
                          f"the task table (params/tasks/lm_eval.yaml)")
    if source == "hub":
        return hub_name
    if hub_name not in STANDIN_OF:
        raise ConfigError(f"task {spec.name!r}: lm-eval task {hub_name!r} has no packaged stand-in; stand-ins exist "
                          f"for {', '.join(sorted(STANDIN_OF))} (leanlm.lm_eval.standins.THESIS_TASKS)")
    return STANDIN_OF[hub_name]


def include_path(profile: str, source: str) -> Path | None:
    """The directory of local lm-eval tasks (packaged source), None for lm-eval's own (hub)."""
    return paths.data_dir(profile) / "tasks" / LM_EVAL_DIR if source == "packaged" else None


@contextmanager
def lm_eval_include(config: dict, names: list[str]) -> Iterator[Path | None]:
    """The ``include_path`` lm-eval finds the lm-eval tasks ``names`` under, for one evaluation: the
    packaged stand-ins' folder; with the hub source and a mirror set, a temporary folder of tasks that
    run lm-eval's own definitions on the mirror's data (:func:`leanlm.lm_eval.mirror.redirected_tasks`);
    else None (lm-eval's own tasks, reading the hub or its cache)."""
    if config["source"] != "hub":
        yield include_path(config["profile"], config["source"])
        return
    from leanlm.lm_eval.mirror import redirected_tasks

    with redirected_tasks(list(names), config["profile"]) as folder:
        yield folder


def heldout_labelled(raw_dir: Path, corpus_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """``{"sentiment": [(text, "negative" | "positive"), ...]}``: the movie snippets the corpus put in its
    test split (never pretrained on), labelled by their human scores; neutral ones are left out."""
    from leanlm.data.sources.packaged_raw import read_movie_snippets

    held_out = {row["doc_id"].split(":", 1)[1] for row in read_jsonl(corpus_dir / f"{HELDOUT_SPLIT}.jsonl")
                if row["source"] == "movie_snippets"}
    if not held_out:
        return {}
    examples = [(s.text, "positive" if s.score > 0 else "negative") for s in read_movie_snippets(raw_dir)
                if s.snippet_id in held_out and abs(s.score) >= SENTIMENT_BAND]
    return {"sentiment": examples} if examples else {}


def build_lm_eval_dir(config: dict, tasks_out: Path) -> Path | None:
    """The tasks stage's part for the lm-eval families: write ``tasks_out/lm_eval/`` (None when the
    profile runs neither family). A stand-in the corpus gives no example for is left out with a warning
    (MANIFEST.json's ``skipped``); evaluating it fails then, naming the reason."""
    specs = [spec for family in LM_EVAL_FAMILIES for spec in _specs(config, family)]
    if not specs:
        return None
    out = Path(tasks_out) / LM_EVAL_DIR
    names = {spec.name: lm_eval_task_name(spec, config["source"]) for spec in specs}
    if config["source"] == "hub":
        from leanlm.lm_eval.mirror import check_mirrored

        check_mirrored(sorted(set(names.values())), config["profile"])  # fail here, not after pretraining
        write_json(out / "MANIFEST.json", {"source": "hub", "tasks": names,
                                           "note": "lm-eval reads these tasks' data itself at evaluation: from "
                                                   "the hub mirror when one is set, else from the hub"})
        return out
    data = paths.data_dir(config["profile"])
    settings = config["data"]["tasks"]
    corpus_dir = data / "corpus"
    split = corpus_dir / f"{HELDOUT_SPLIT}.jsonl"
    if not split.is_file():
        raise DataError(f"{split} is missing: the lm-eval stand-ins are built from held-out documents; run the "
                        f"corpus stage first")
    documents = [row["text"] for row in read_jsonl(split)]
    written = build_lm_eval_tasks(documents, heldout_labelled(data / "raw", corpus_dir), out, seed=settings["seed"],
                                  max_examples=settings.get("max_eval_examples") or UNCAPPED,
                                  max_page_words=settings.get("lm_eval_page_words"))
    missing = sorted(f"{task} ({name})" for task, name in names.items() if name not in written)
    if missing:  # not fatal here: a profile that never evaluates (e.g. a data-only check) still builds
        log.warning("the held-out corpus gives no example for the lm-eval stand-in(s) of %s; evaluating them "
                    "will fail (raise data.corpus.test_fraction or use more documents)", ", ".join(missing))
    log.info("tasks: lm-eval stand-ins %s -> %s", ", ".join(sorted(written)), out)
    return out


def _specs(config: dict, family: str) -> list[TaskSpec]:
    from leanlm.data.tasks import get_task

    return [get_task(name) for name in config["finetune"].get(family, {}).get("tasks", [])]
