"""lm-eval's own tasks reading their documents from the hub mirror (compute nodes without network).

With a hub mirror set (:mod:`leanlm.data.plumbing.mirror`), the ``lm_eval`` and ``analysis`` families still run
lm-eval's own task definitions: the prompts (``doc_to_text``), options and targets, the ``process_docs``
functions of the task's ``utils.py``, the filters and the metrics. Only where the documents come from
changes. For each task, :func:`redirect_config` builds the config lm-eval runs: lm-eval's own YAML of the
task, read with lm-eval's loader (includes merged, ``!function`` tags resolved beside the original, inside
lm-eval's installed ``tasks/`` folder and nowhere else), with the data source alone overridden:
``dataset_path: arrow`` (the ``datasets`` builder for Arrow files) with ``dataset_kwargs.data_files``
naming, per split, the Arrow files ``save_to_disk`` wrote under
``datasets/<dataset id>/<config or "default">/<split>/`` of the mirror. The hub's features (ClassLabel
labels, nested choices) are kept in those files' schema, so the documents lm-eval reads are the hub's.

The configs are handed to lm-eval as they are, never written as task files for it to find: lm-eval
imports the Python a task YAML names, so it reads no folder that data could reach. ``datasets`` prepares
its copy of the data in a temporary folder for the length of one evaluation (:func:`redirected_tasks`),
so nothing piles up in the home cache of a compute node. Use the configs inside the ``with`` block. A
mirror that lacks a task's dataset or one of the splits lm-eval's config names
(:func:`leanlm.lm_eval.configs.task_dataset`) is a DataError naming the task, the dataset
and the command that fills the mirror.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from leanlm.data.plumbing import mirror
from leanlm.errors import DataError
from leanlm.lm_eval.configs import task_dataset, task_yaml

ARROW_BUILDER = "arrow"  # datasets' packaged builder for Arrow files (what save_to_disk writes)


def mirrored_split_files(root: Path, task: str, profile: str) -> dict[str, list[str]]:
    """``{split: [Arrow files]}`` of every split lm-eval's config of ``task`` reads, from the mirror at
    ``root``; DataError naming the task and the fill command when the mirror lacks them."""
    source = task_dataset(task)
    folder = mirror.dataset_dir(root, source.path, source.name)
    what = f"{source.path} (config {source.name}), which lm-eval task {task!r} reads"
    if not (folder / "dataset_dict.json").is_file():
        raise DataError(f"the hub mirror ({mirror.ENV_VAR} or {mirror.SETTING}) at {root} has no dataset "
                        f"{what}; expected it at {folder}; {mirror.how_to_fill(profile)}")
    files, absent = {}, []
    for split in source.splits:
        found = sorted((folder / split).glob("*.arrow"))
        if found:
            files[split] = [str(path) for path in found]
        else:
            absent.append(split)
    if absent:
        raise DataError(f"the hub mirror at {folder} lacks split(s) {', '.join(absent)} of {what} (it reads "
                        f"{', '.join(source.splits)}); {mirror.how_to_fill(profile)}")
    return files


def redirect_config(task: str, root: Path, profile: str, cache_dir: Path | None = None) -> dict:
    """The config lm-eval runs for ``task``: lm-eval's own (its installed YAML, includes and ``!function``
    tags resolved by lm-eval's loader) with only its data source moved to the mirror at ``root`` (and
    ``datasets``' cache of it to ``cache_dir``, if given)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    kwargs: dict = {"data_files": mirrored_split_files(root, task, profile)}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    own = load_yaml(task_yaml(task), resolve_func=True, recursive=True)
    return {**own, "task": task, "dataset_path": ARROW_BUILDER, "dataset_name": None, "dataset_kwargs": kwargs}


def check_mirrored(tasks: list[str], profile: str) -> None:
    """DataError unless the active mirror holds every split ``tasks`` read (nothing when no mirror)."""
    root = mirror.active_mirror()
    if root is not None:
        for task in tasks:
            mirrored_split_files(root, task, profile)


@contextmanager
def redirected_tasks(tasks: list[str], profile: str) -> Iterator[dict[str, dict] | None]:
    """``{task: config}`` under which lm-eval's ``tasks`` read the active mirror (:func:`redirect_config`;
    ``datasets`` caches their data in a temporary folder, removed afterwards); None when no mirror is set
    (lm-eval then reads the hub or its cache itself)."""
    root = mirror.active_mirror()
    if root is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="leanlm-lm-eval-mirror-") as folder:
        yield {task: redirect_config(task, root, profile, cache_dir=Path(folder) / "cache") for task in tasks}
