"""Every metric ch. 4 declares is one lm-eval reports: params/tasks/lm_eval.yaml and the packaged
stand-ins are checked against lm-eval's own task configs (its offline TaskManager index), since the
runner refuses results that lack a declared metric (BoolQ, COPA and RTE report ``acc`` only)."""

from __future__ import annotations

import pytest
import yaml
from lm_eval.tasks import TaskManager

from leanlm.lm_eval.standins import THESIS_TASKS, build_lm_eval_tasks
from leanlm.data.tasks import tasks_in_family
from leanlm.lm_eval.configs import metric_names
from leanlm.errors import ConfigError

from test_lm_eval_tasks import HELD_OUT_REVIEWS, corpus


@pytest.fixture(scope="module")
def lm_eval_index():
    return TaskManager(include_defaults=True).task_index


def own_metrics(index, task: str) -> list[str]:
    return [m["metric"] for m in index[task].cfg["metric_list"]]


def test_declared_metrics_are_lm_evals(lm_eval_index):
    # (The analysis family's perplexity is computed by leanlm.runners.analysis, not by lm-eval.)
    specs = tasks_in_family("lm_eval")
    assert {spec.hub["task"] for spec in specs} == set(THESIS_TASKS.values())
    for spec in specs:
        reported = own_metrics(lm_eval_index, spec.hub["task"])
        assert spec.metrics == reported, (spec.name, spec.metrics, reported)
        assert spec.primary_metric in reported


def test_acc_only_tasks(lm_eval_index):
    # The case that broke the paper profile: lm-eval's BoolQ, COPA and RTE have no acc_norm.
    for task in ("boolq", "copa", "rte"):
        assert own_metrics(lm_eval_index, task) == ["acc"]
        assert metric_names(task) == ["acc"]


def test_unknown_task_is_named():
    with pytest.raises(ConfigError, match="no_such_task"):
        metric_names("no_such_task")


def test_stand_ins_declare_their_tasks_metrics(tmp_path, lm_eval_index):
    paths = build_lm_eval_tasks(corpus(), {"sentiment": HELD_OUT_REVIEWS}, tmp_path, seed=3, max_examples=6)
    assert set(paths) == set(THESIS_TASKS)
    for name, path in paths.items():
        config = yaml.safe_load(path.read_text())
        assert config["metric_list"] == lm_eval_index[THESIS_TASKS[name]].cfg["metric_list"], name


def test_the_cached_task_index_is_lm_evals_own(lm_eval_index, tmp_path, monkeypatch):
    # Every ch. 4 job read lm-eval's index (about 10 s of CPU each); it is kept in the cache once per
    # machine. What the cache gives must be what lm-eval's own index holds, and a later process must
    # read the file instead of building the index again.
    from leanlm.lm_eval import configs as lm_eval_configs
    from leanlm.lm_eval.configs import index_cache_file, task_config, task_yaml

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path))
    lm_eval_configs._task_index.cache_clear()
    try:
        for task in [*THESIS_TASKS.values(), "wikitext", "lambada_openai"]:
            assert task_config(task) == lm_eval_index[task].cfg, task
            assert task_yaml(task) == lm_eval_index[task].yaml_path
        assert index_cache_file().parent == tmp_path / "lm_eval" and index_cache_file().is_file()
        lm_eval_configs._task_index.cache_clear()

        def rebuilt(*args, **kwargs):
            raise AssertionError("lm-eval's task index was built again")

        monkeypatch.setattr("lm_eval.tasks.TaskManager", rebuilt)
        assert metric_names("boolq") == ["acc"]
        with pytest.raises(ConfigError, match="has no task named 'no_such_task'"):
            task_config("no_such_task")
    finally:
        lm_eval_configs._task_index.cache_clear()
