"""The task registry (params/tasks.yaml): names, thesis metrics, schema checks, clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from leanlm.data.tasks import get_task, metric_names, task_names, tasks_in_family
from leanlm.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
GLUE = ["mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb"]


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(REPO))


def test_glue_family_in_thesis_order():
    assert [t.name for t in tasks_in_family("glue")] == GLUE
    assert [t.thesis_name for t in tasks_in_family("glue")] == ["MNLI", "QNLI", "QQP", "RTE", "SST", "MRPC", "CoLA", "STS"]
    assert task_names()[:8] == GLUE


def test_thesis_metrics_appendix_3_8():
    # "matched accuracy for MNLI, Matthews correlation for CoLA, Spearman correlation for STS,
    # F1 score for QQP and accuracy for all other tasks"
    primary = {t.name: t.primary_metric for t in tasks_in_family("glue")}
    assert primary == {"mnli": "accuracy", "qnli": "accuracy", "qqp": "f1", "rte": "accuracy",
                       "sst2": "accuracy", "mrpc": "accuracy", "cola": "matthews", "stsb": "spearman"}
    assert get_task("qqp").metrics == ["f1", "accuracy"]
    assert get_task("stsb").metrics == ["spearman", "pearson"]
    for spec in tasks_in_family("glue"):
        assert spec.metrics[0] == spec.primary_metric
        assert set(spec.metrics) <= {"accuracy", "f1", "matthews", "spearman", "pearson"} <= set(metric_names())


def test_shapes_labels_and_hub_schema():
    stsb, mnli, cola = get_task("stsb"), get_task("mnli"), get_task("cola")
    assert (stsb.label_kind, stsb.num_labels, stsb.label_names, stsb.is_regression) == ("regression", 1, [], True)
    assert (mnli.num_labels, mnli.label_names) == (3, ["entailment", "neutral", "contradiction"])
    assert mnli.hub["validation"] == "validation_matched" and mnli.hub["dataset"] == "nyu-mll/glue"
    assert (cola.input_shape, cola.hub["text_b"], cola.is_pair) == ("single", None, False)
    for spec in tasks_in_family("glue"):
        assert spec.family == "glue" and spec.hub["config"] == spec.name and spec.packaged
        assert (spec.hub["text_b"] is not None) == (spec.input_shape == "pair")
        assert len(spec.label_names) == (0 if spec.is_regression else spec.num_labels)


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ConfigError) as err:
        get_task("boolq_v9")
    message = str(err.value)
    assert "'boolq_v9'" in message and "params/tasks" in message
    for name in GLUE:
        assert name in message
    with pytest.raises(ConfigError, match="unknown task family 'glue2'.*known: glue"):
        tasks_in_family("glue2")


def test_profiles_name_only_registered_tasks():
    for profile in ("smoke", "paper", "rehearsal"):
        config = yaml.safe_load((REPO / "params" / f"{profile}.yaml").read_text())
        for family, settings in config["finetune"].items():
            assert [get_task(t).family for t in settings["tasks"]] == [family] * len(settings["tasks"])


def _broken_table(tmp_path: Path, monkeypatch, edit) -> None:
    shutil.copytree(REPO / "params", tmp_path / "params")
    table = yaml.safe_load((tmp_path / "params" / "tasks" / "glue.yaml").read_text())
    edit(table)
    (tmp_path / "params" / "tasks" / "glue.yaml").write_text(yaml.safe_dump(table))
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t["glue"]["cola"].update(metrics=["auc"]), r"glue\.cola\.metrics.*'auc'.*each must be one of .*accuracy.*matthews"),
    (lambda t: t["glue"]["qqp"].update(primary_metric="accuracy"), r"glue\.qqp\.primary_metric.*metrics\[0\] = 'f1'"),
    (lambda t: t["glue"]["stsb"].update(num_labels=2), r"glue\.stsb\.num_labels.*needs 1 for regression"),
    (lambda t: t["glue"]["rte"]["hub"].update(text_b=None), r"glue\.rte\.hub\.text_b"),
    (lambda t: t["glue"]["sst2"].update(input_shape="triple"), r"glue\.sst2\.input_shape.*'triple'"),
    (lambda t: t["glue"]["mnli"].pop("label_names"), r"glue\.mnli: missing keys \['label_names'\]"),
])
def test_malformed_table_names_the_key(tmp_path, monkeypatch, edit, message):
    _broken_table(tmp_path, monkeypatch, edit)
    with pytest.raises(ConfigError, match=message):
        get_task("sst2")


def test_missing_table_says_where_it_belongs(tmp_path, monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    with pytest.raises(ConfigError, match=r"params/tasks/<family>\.yaml"):
        get_task("sst2")
