"""The hub source without the hub: fail-fast when offline, and every schema mapping on local fixtures.

The fixtures (tests/fixtures/glue/<config>/<split>.jsonl, tests/fixtures/hub_corpus/) are rows in the
hub's own schema, loaded with ``datasets.load_dataset("json", ...)`` as the real data would be.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GLUE = ["mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from leanlm.data.families import glue  # noqa: E402  (after the offline switches)
from leanlm.data.sources import hub  # noqa: E402
from leanlm.data.tasks import get_task  # noqa: E402
from leanlm.errors import ConfigError, DataError  # noqa: E402


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(REPO))
    monkeypatch.setattr(hub, "_reachable", False)


def _glue_fixture(config: str, cache: Path):
    import datasets

    files = {p.stem: str(p) for p in sorted((FIXTURES / "glue" / config).glob("*.jsonl"))}
    return datasets.load_dataset("json", data_files=files, cache_dir=str(cache))


def _raw_rows(config: str, split: str) -> list[dict]:
    path = FIXTURES / "glue" / config / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_offline_variables_fail_fast_with_advice(monkeypatch, variable):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "1")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("must not try the network"))
    with pytest.raises(DataError) as err:
        glue.load_glue(get_task("mnli"), "paper")
    message = str(err.value)
    assert "profile 'paper' uses source 'hub' (nyu-mll/glue/mnli)" in message
    assert f"{variable}=1" in message and "params/smoke.yaml" in message and "run with network" in message


def test_no_connection_fails_fast(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    calls = []

    def refuse(address, timeout):
        calls.append((address, timeout))
        raise OSError("connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(DataError, match=r"unreachable \(no connection to huggingface\.co:443 within 3 s"):
        hub.ensure_hub_reachable("wikimedia/wikipedia", "paper")
    assert calls == [(("huggingface.co", 443), 3.0)]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    with pytest.raises(DataError, match=r"proxy\.example:3128"):
        hub.ensure_hub_reachable("wikimedia/wikipedia", "paper")


def test_hub_stages_fail_fast_offline(tmp_path, monkeypatch):
    from leanlm.data.plumbing.stages import run_stage

    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = yaml.safe_load((tmp_path / "params" / "paper.yaml").read_text())
    for stage in ("fetch", "tokenizer"):
        with pytest.raises(DataError, match="Hugging Face hub is unreachable"):
            run_stage(stage, config)
    assert not (tmp_path / "data" / "paper" / "raw").exists()  # nothing half-written


@pytest.mark.parametrize("config", GLUE)
def test_glue_mapping_on_hub_schema_fixtures(config, tmp_path):
    spec = get_task(config)
    dataset = _glue_fixture(config, tmp_path)
    splits, provenance = glue.glue_task_splits(spec, dataset, seed=13, heldout_fraction=0.1)
    raw_train = _raw_rows(config, "train")
    raw_validation = _raw_rows(config, spec.hub["validation"])
    # validation is GLUE's dev set (MNLI: validation_matched), row for row
    assert [(r["idx"], r["text_a"], r["text_b"], r["label"]) for r in splits["validation"]] == [
        (r["idx"], r[spec.hub["text_a"]], r[spec.hub["text_b"]] if spec.is_pair else None, r["label"])
        for r in raw_validation
    ]
    # train and the held-out test partition GLUE train
    by_idx = {r["idx"]: r for r in raw_train}
    train_idx = [r["idx"] for r in splits["train"]]
    test_idx = [r["idx"] for r in splits["test"]]
    assert sorted(train_idx + test_idx) == sorted(by_idx) and not set(train_idx) & set(test_idx)
    for row in splits["train"] + splits["test"]:
        source = by_idx[row["idx"]]
        assert row["text_a"] == source[spec.hub["text_a"]]
        assert row["text_b"] == (source[spec.hub["text_b"]] if spec.is_pair else None)
        assert row["label"] == source["label"]
        assert isinstance(row["label"], float if spec.is_regression else int)
    assert provenance["validation"] == spec.hub["validation"] and provenance["hidden_labels_dropped"] == 0


def test_heldout_test_is_a_seeded_tenth_of_train():
    spec = get_task("sst2")
    rows = [{"sentence": f"sentence number {i}", "label": i % 2, "idx": i} for i in range(2000)]
    data = {"train": rows, "validation": rows[:5]}
    splits, _ = glue.glue_task_splits(spec, data, seed=13, heldout_fraction=0.1)
    assert 150 < len(splits["test"]) < 250
    again, _ = glue.glue_task_splits(spec, data, seed=13, heldout_fraction=0.1)
    other, _ = glue.glue_task_splits(spec, data, seed=14, heldout_fraction=0.1)
    assert again == splits and other["test"] != splits["test"]
    # Off (the paper profile): the full official train split, no test split.
    full, provenance = glue.glue_task_splits(spec, data, seed=13, heldout_fraction=0.0)
    assert full["train"] == splits["train"] + splits["test"] or sorted(r["idx"] for r in full["train"]) == list(range(2000))
    assert full["test"] == [] and "full official split" in provenance["train"]
    with pytest.raises(ConfigError, match="heldout_fraction=1.0"):
        glue.glue_task_splits(spec, data, seed=13, heldout_fraction=1.0)


def test_hidden_labels_and_missing_columns(tmp_path):
    spec = get_task("mnli")
    hidden = _raw_rows("mnli", "test_matched")
    assert hidden[0]["label"] == -1
    assert glue.map_glue_rows(spec, hidden) == ([], 1)
    with pytest.raises(DataError, match=r"no column 'premise'.*glue\.mnli\.hub.*columns: sentence1"):
        glue.map_glue_rows(spec, [{"sentence1": "a", "sentence2": "b", "label": 0, "idx": 0}])
    with pytest.raises(DataError, match="no split 'validation_matched'"):
        glue.glue_task_splits(spec, {"train": []}, seed=1, heldout_fraction=0.0)


def test_hub_tasks_stage_writes_the_task_sets(tmp_path, monkeypatch):
    from leanlm.data.plumbing.stages import run_stage

    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
    monkeypatch.setattr(glue, "load_glue", lambda spec, profile: _glue_fixture(spec.hub["config"], tmp_path / "hf"))
    config = yaml.safe_load((tmp_path / "params" / "paper.yaml").read_text())
    # GLUE's hub path only; the other families' hub loaders have their own fixture tests.
    config["finetune"] = {"glue": config["finetune"]["glue"]}
    run_stage("fetch", config)
    manifest = json.loads((tmp_path / "data" / "paper" / "raw" / "MANIFEST.json").read_text())
    assert manifest["source"] == "hub" and manifest["tasks"]["mnli"]["validation"] == "validation_matched"
    run_stage("tasks", config)
    for name in GLUE:
        meta = json.loads((tmp_path / "data" / "paper" / "tasks" / name / "META.json").read_text())
        assert meta["source"] == "hub" and meta["provenance"]["dataset"] == "nyu-mll/glue"
        # The paper profile fine-tunes on the full official train split, as the thesis does (DESIGN §8).
        assert meta["splits"]["test"]["rows"] == 0
        assert meta["splits"]["train"]["rows"] == len(_raw_rows(name, "train"))
        assert meta["provenance"]["train"] == f"{get_task(name).hub['train']} (the full official split)"
        rows = (tmp_path / "data" / "paper" / "tasks" / name / "validation.jsonl").read_text().splitlines()
        assert len(rows) == meta["splits"]["validation"]["rows"] == len(_raw_rows(name, get_task(name).hub["validation"]))
        assert set(json.loads(rows[0])) == {"idx", "text_a", "text_b", "label"}


def test_wikipedia_and_bookcorpus_documents(tmp_path):
    import datasets

    wiki = datasets.load_dataset("json", data_files=str(FIXTURES / "hub_corpus" / "wikipedia.jsonl"),
                                 split="train", cache_dir=str(tmp_path))
    docs = list(hub.wikipedia_documents(wiki))
    assert [d.doc_id for d in docs] == ["wikipedia:12", "wikipedia:25", "wikipedia:39", "wikipedia:290"]
    assert docs[0].text == ("Anarchism is a political philosophy and movement that is sceptical of authority.\n"
                            "History\nThe earliest anarchist themes can be found in the 6th century BC.")
    assert "\u200b" not in docs[1].text and docs[3].text == ""
    books = datasets.load_dataset("json", data_files=str(FIXTURES / "hub_corpus" / "bookcorpus.jsonl"),
                                  split="train", cache_dir=str(tmp_path))
    chunks = list(hub.bookcorpus_documents(books, lines_per_document=3))
    assert [d.doc_id for d in chunks] == ["bookcorpus:0", "bookcorpus:1"]
    assert chunks[0].text.startswith("the half-ling book") and chunks[0].text.endswith("the rain had not stopped for three days .")
    assert chunks[1].text == "`` we should go , '' he said quietly . nobody moved . outside , the wind pulled at the shutters ."


def test_hub_corpus_stage_streams_into_the_corpus_shape(tmp_path, monkeypatch):
    import datasets

    from leanlm.data.plumbing.stages import run_stage

    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))

    def fixture_stream(profile):
        wiki = datasets.load_dataset("json", data_files=str(FIXTURES / "hub_corpus" / "wikipedia.jsonl"),
                                     split="train", cache_dir=str(tmp_path / "hf"))
        books = datasets.load_dataset("json", data_files=str(FIXTURES / "hub_corpus" / "bookcorpus.jsonl"),
                                      split="train", cache_dir=str(tmp_path / "hf"))
        return hub._interleave([hub.wikipedia_documents(wiki), hub.bookcorpus_documents(books, 2)])

    monkeypatch.setattr(hub, "stream_hub_corpus", fixture_stream)
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
    config = yaml.safe_load((tmp_path / "params" / "paper.yaml").read_text())
    config["data"]["corpus"].update(validation_fraction=0.3, test_fraction=0.3, split_seed=1)
    run_stage("fetch", config)
    run_stage("corpus", config)
    stats = json.loads((tmp_path / "data" / "paper" / "corpus" / "STATS.json").read_text())
    assert stats["total"]["documents"] == 6 and stats["dropped"] == {"empty": 1, "duplicate": 0}
    assert stats["by_source"]["wikipedia"]["documents"] == 3 and stats["by_source"]["bookcorpus"]["documents"] == 3
    config["data"]["corpus"]["max_documents"] = 5  # a stream is capped at its first documents (interleaved)
    run_stage("corpus", config)
    stats = json.loads((tmp_path / "data" / "paper" / "corpus" / "STATS.json").read_text())
    assert stats["total"]["documents"] == 5
    assert {s: c["documents"] for s, c in stats["by_source"].items()} == {"wikipedia": 3, "bookcorpus": 2}


def test_bookcorpus_streams_from_the_parquet_copy_when_its_script_does_not_load(tmp_path, monkeypatch):
    """bookcorpus/bookcorpus is a script dataset: recent `datasets` refuse it at the main revision, and the
    corpus is read from the hub's parquet conversion instead (as the Penn Treebank is); Wikipedia loads at main."""
    import datasets

    from leanlm.data.families.lm import PARQUET_REVISION

    calls, real_load = [], datasets.load_dataset

    def load_dataset(name, config=None, split=None, streaming=False, revision=None):
        calls.append((name, revision))
        if name == "bookcorpus/bookcorpus" and revision is None:
            raise RuntimeError("Dataset scripts are no longer supported, but found bookcorpus.py")
        fixture = "bookcorpus" if name == "bookcorpus/bookcorpus" else "wikipedia"
        return real_load("json", data_files=str(FIXTURES / "hub_corpus" / f"{fixture}.jsonl"), split="train",
                         streaming=streaming)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
    docs = list(hub.stream_hub_corpus("paper"))
    assert calls == [("wikimedia/wikipedia", None), ("bookcorpus/bookcorpus", None),
                     ("bookcorpus/bookcorpus", PARQUET_REVISION)]
    assert {d.source for d in docs} == {"wikipedia", "bookcorpus"}

    def never(name, config=None, split=None, streaming=False, revision=None):
        raise RuntimeError(f"no {name} at {revision}")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(DataError, match=r"could not stream wikimedia/wikipedia/20231101.en .*revision main: .*"
                                        r"revision refs/convert/parquet: "):
        hub.stream_hub_corpus("paper")
