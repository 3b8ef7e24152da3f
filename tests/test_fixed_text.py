"""FixedSeqQK's fixed text from FineWeb's sample-10BT (§4.3.4, DESIGN §8) in the paper profile.

ch4.yaml's ``pretrain_data.fixed_text: fineweb`` names the corpus; the paper profile defines
``data.corpora.fineweb`` and the smoke profile no named corpora (its runs read their own corpus). Offline:
FineWeb is a local fixture in its hub schema (``text``, ``id``, ``dump``, ...) streamed with ``datasets``
through the corpora stage (only the download is monkeypatched); the paper dry run is Snakemake's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leanlm.config import _load_matrix_cached, load_config

from leanlm.data.sources import hub
from leanlm.data import pretrain_data as named_data
from leanlm.errors import ConfigError, DataError
from leanlm.io import read_jsonl, write_jsonl
from leanlm.runs import get_run, named_pretrain_data, runs
from leanlm.runs import reads_fixed_text
from leanlm.routes.fixed_text import attach_fixed_sequence
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)

REPO = Path(__file__).resolve().parents[1]
FIXED_RUNS = {"ch4_uniform-fixed_seq_qk", "ch4_hybrid-fixed_seq_qk", "ch4_skip-fixed_seq_qk",
              "ch4_sizes-70m_fixed_seq_qk", "ch4_sizes-70m_hybrid_fixed_seq_qk", "ch4_sizes-160m_fixed_seq_qk",
              "ch4_sizes-160m_hybrid_fixed_seq_qk", "ch4_sizes-500m_fixed_seq_qk",
              "ch4_sizes-500m_hybrid_fixed_seq_qk"}
WORDS = ("river harbour market chapel orchard meadow bridge library windmill castle garden quarry village "
         "morning summer winter people visitors stones water light").split()
LENGTH = 16  # the tiny model's max_position: the fixed text's length



# ------------------------------------------------------------------------------------------ config
def test_paper_reads_fineweb_for_fixedseqqk_runs_and_smoke_its_own_corpus(scratch_root):
    paper = load_config("params/paper.yaml")
    fineweb = paper["data"]["corpora"]["fineweb"]
    assert (fineweb["dataset"], fineweb["config"], fineweb["split"], fineweb["text_field"]) == (
        "HuggingFaceFW/fineweb", "sample-10BT", "train", "text")
    assert fineweb["max_documents"] * fineweb["validation_fraction"] >= 100  # enough held-out documents
    resolved = {run.run_id: run.fixed_text_corpus for run in runs(paper)}
    assert {run_id for run_id, name in resolved.items() if name} == FIXED_RUNS
    assert set(resolved[run_id] for run_id in FIXED_RUNS) == {"fineweb"}

    fixed = get_run(paper, "ch4_uniform-fixed_seq_qk")
    assert (fixed.pretrain_corpus, fixed.pretrain_tokenizer) == ("slimpajama", "pythia")  # pretraining unchanged
    assert named_pretrain_data(paper, fixed)["fixed_text"] == {"fineweb": fineweb}
    data = named_data.run_data(paper, fixed)
    assert data.fixed_text_dir == scratch_root / "data" / "paper" / "corpora" / "fineweb"
    assert data.corpus_dir == scratch_root / "data" / "paper" / "corpora" / "slimpajama"
    assert data.fixed_text_corpus("paper") == "fineweb"
    standard = get_run(paper, "ch4_uniform-standard")  # reads no fixed text: neither identity nor params change
    assert standard.fixed_text_corpus == "" and "fixed_text" not in named_pretrain_data(paper, standard)
    assert named_data.run_data(paper, standard).fixed_text_dir == named_data.run_data(paper, standard).corpus_dir

    smoke = load_config("params/smoke.yaml")
    assert all(run.fixed_text_corpus == "" for run in runs(smoke))
    data = named_data.run_data(smoke, get_run(smoke, "ch4_uniform-fixed_seq_qk"))
    assert data.fixed_text_dir == data.corpus_dir == scratch_root / "data" / "smoke" / "corpus"
    assert data.fixed_text_corpus("smoke") == "profile smoke"


def test_which_models_read_a_fixed_text():
    base = {"backbone": "qwen", "n_layers": 4, "attention": "fixed_seq_qk"}
    assert reads_fixed_text(base) and reads_fixed_text({**base, "layout": "hybrid"})
    assert not reads_fixed_text({**base, "attention": "rnd_emb_qk"})  # random vectors, no text
    assert not reads_fixed_text({**base, "backbone": "gpt2"}) and not reads_fixed_text({**base, "attention": "mha"})


def test_unknown_fixed_text_fails_naming_file_experiment_and_key(scratch_root):
    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_uniform"]["pretrain_data"].update(fixed_text="finweb"))
    with pytest.raises(ConfigError) as err:
        load_config("params/paper.yaml")
    message = str(err.value)
    assert "params/experiments/ch4.yaml (experiment 'ch4_uniform'" in message
    assert "pretrain_data.fixed_text = 'finweb'" in message and "(key data.corpora)" in message
    assert "allowed: 'slimpajama', 'fineweb'" in message and "paper.yaml" in message
    smoke = load_config("params/smoke.yaml")  # no named corpora: the run's own corpus, whatever the name
    assert get_run(smoke, "ch4_uniform-fixed_seq_qk").fixed_text_corpus == ""

    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_uniform"]["pretrain_data"].update(fixed_text=7))
    with pytest.raises(ConfigError, match=r"ch4\.yaml.*ch4_uniform\.pretrain_data\.fixed_text"):
        load_config("params/smoke.yaml")  # the schema checks the type in every profile


def test_fixed_text_is_part_of_the_evaluated_models_data(scratch_root):
    # The pretraining corpus named as fixed text means that corpus (""), unlike the hybrid it evaluates.
    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_skip"]["runs"]["fixed_seq_qk"].update(pretrain_data={"fixed_text": "slimpajama"}))
    with pytest.raises(ConfigError, match=r"ch4_skip-fixed_seq_qk evaluates ch4_hybrid-fixed_seq_qk's model but "
                                          r"names other pretraining data.*fixed_text"):
        load_config("params/paper.yaml")

    def everywhere(doc):  # every experiment: the text comes from the pretraining corpus
        for experiment in doc.values():
            experiment["pretrain_data"]["fixed_text"] = "slimpajama"

    edit_yaml(scratch_root / "params/experiments/ch4.yaml", everywhere)
    paper = load_config("params/paper.yaml")
    assert get_run(paper, "ch4_hybrid-fixed_seq_qk").fixed_text_corpus == ""
    assert named_data.run_data(paper, get_run(paper, "ch4_hybrid-fixed_seq_qk")).fixed_text_corpus("paper") == \
        "slimpajama"


# ------------------------------------------------------------------------------------------ the text
def _fineweb_rows(n: int, short: set[int]) -> list[dict]:
    """Rows in FineWeb's hub schema; those at positions ``short`` are too short for the fixed text."""
    rows = []
    for i in range(n):
        words = 5 if i in short else 30
        text = f"page{i} " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(words - 1))
        rows.append({"text": text, "id": f"<urn:uuid:{i:08d}>", "dump": f"CC-MAIN-2013-{20 + i % 3}",
                     "url": f"https://example.org/{i}", "date": "2013-05-18T05:48:54Z",
                     "file_path": "s3://commoncrawl/x.warc.gz", "language": "en", "language_score": 0.9,
                     "token_count": words})
    return rows


def _slimpajama_rows(n: int) -> list[dict]:
    return [{"text": f"slim {WORDS[i % len(WORDS)]} document {i} " * 3, "meta": {"redpajama_set_name": "RedPajamaC4"}}
            for i in range(n)]


def _word_tokenizer():
    """One token per word, so document lengths are word counts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def _tiny_model(attention: str):
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.models import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(backbone="qwen", vocab_size=len(WORDS) + 1, n_layers=2, d_model=16, n_heads=2, head_dim=8,
                      d_ff=32, max_position=LENGTH, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                      attention=attention, layout="hybrid")
    return build_model(cfg, "causal_lm")


def _first_long_document(path: Path, tokenizer) -> dict:
    return next(doc for doc in read_jsonl(path) if len(tokenizer.encode(doc["text"]).ids) >= LENGTH)


def test_fixedseqqk_text_is_a_fineweb_document_in_paper_and_the_own_corpus_in_smoke(scratch_root, tmp_path,
                                                                                    monkeypatch):
    import datasets

    from leanlm.data.splitting import assign_split

    # The corpus splitter's choice: the first validation document is too short, so the second one is the text.
    validation = [i for i in range(50) if assign_split(f"fineweb:{i}", 13, 0.4, 0.1, namespace="corpus") == "validation"]
    fixtures = {"fineweb": _fineweb_rows(60, {validation[0]}), "slimpajama": _slimpajama_rows(20)}
    for name, rows in fixtures.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)

    def stream(name, spec, profile):  # what load_streaming_rows streams from the hub, from the fixture
        return datasets.load_dataset("json", data_files=str(tmp_path / f"{name}.jsonl"), split="train",
                                     streaming=True, cache_dir=str(tmp_path / "hf"))

    monkeypatch.setattr(named_data, "load_streaming_rows", stream)
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)

    def tiny(doc):
        doc["data"]["corpora"]["slimpajama"].update(max_documents=20, validation_fraction=0.2, test_fraction=0.2)
        doc["data"]["corpora"]["fineweb"].update(max_documents=50, validation_fraction=0.4, test_fraction=0.1)

    edit_yaml(scratch_root / "params/paper.yaml", tiny)
    paper = load_config("params/paper.yaml")
    named_data.run_named_stage("corpora", paper)  # DVC's corpora@paper: SlimPajama and FineWeb
    folder = scratch_root / "data" / "paper" / "corpora" / "fineweb"
    stats = json.loads((folder / "STATS.json").read_text())
    assert stats["total"]["documents"] == 50 and set(stats["by_source"]) == {"CC-MAIN-2013-20", "CC-MAIN-2013-21",
                                                                               "CC-MAIN-2013-22"}
    tokenizer = _word_tokenizer()
    data = named_data.run_data(paper, get_run(paper, "ch4_hybrid-fixed_seq_qk"))
    model = _tiny_model("fixed_seq_qk")
    record = attach_fixed_sequence(model, tokenizer, data.fixed_text_dir, data.fixed_text_corpus("paper"))
    expected = _first_long_document(folder / "validation.jsonl", tokenizer)
    assert expected["doc_id"] == f"fineweb:{validation[1]}"
    assert record == {"corpus": "fineweb", "file": "data/paper/corpora/fineweb/validation.jsonl",
                      "split": "validation", "doc_ids": [expected["doc_id"]], "tokens": LENGTH}
    assert model.model.fixed_token_ids.tolist() == tokenizer.encode(expected["text"]).ids[:LENGTH]
    assert attach_fixed_sequence(_tiny_model("rnd_emb_qk"), tokenizer, data.fixed_text_dir, "fineweb") is None

    smoke = load_config("params/smoke.yaml")  # no hub: the profile's own corpus's held-out documents
    own = scratch_root / "data" / "smoke" / "corpus"
    write_jsonl(own / "validation.jsonl", [{"doc_id": "validation:0", "source": "wikipedia", "text": " ".join(WORDS)}])
    data = named_data.run_data(smoke, get_run(smoke, "ch4_hybrid-fixed_seq_qk"))
    record = attach_fixed_sequence(_tiny_model("fixed_seq_qk"), tokenizer, data.fixed_text_dir,
                                   data.fixed_text_corpus("smoke"))
    assert (record["corpus"], record["file"], record["doc_ids"]) == (
        "profile smoke", "data/smoke/corpus/validation.jsonl", ["validation:0"])


def test_missing_fixed_text_corpus_names_it(scratch_root):
    paper = load_config("params/paper.yaml")
    data = named_data.run_data(paper, get_run(paper, "ch4_uniform-fixed_seq_qk"))
    with pytest.raises(DataError, match=r"fineweb/validation\.jsonl is missing.*corpus fineweb"):
        attach_fixed_sequence(_tiny_model("fixed_seq_qk"), _word_tokenizer(), data.fixed_text_dir, "fineweb")


def test_fineweb_stream_fails_fast_offline(scratch_root, monkeypatch):
    import socket

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_reachable", False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("must not try the network"))
    spec = load_config("params/paper.yaml")["data"]["corpora"]["fineweb"]
    with pytest.raises(DataError, match=r"corpus fineweb: HuggingFaceFW/fineweb/sample-10BT.*unreachable"):
        named_data.stream_corpus("fineweb", spec, "paper")


# ------------------------------------------------------------------------------------------ Snakemake
def test_paper_dry_run_gives_fineweb_to_fixedseqqk_pretraining_only(tmp_path):
    """Snakemake's own dry run of every trained ch. 4 model of the paper profile: each pretraining job
    reads SlimPajama, and FineWeb exactly when it is a FixedSeqQK run; one corpora job writes both."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    shutil.copytree(REPO / "params", root / "params")
    for sub in ("rules", "schemas", "templates", "profiles"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    env = {**os.environ, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"), "HF_HUB_OFFLINE": "1"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        _load_matrix_cached.cache_clear()
        trained = [run for run in runs(load_config(root / "params" / "paper.yaml"))
                   if run.experiment.startswith("ch4_") and not run.evaluate_from]
        _load_matrix_cached.cache_clear()
    targets = [f"models/paper/{run.run_id}/model.safetensors" for run in trained]
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "1", "-n",
                           "--configfile", "params/paper.yaml"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", out)
    inputs = {}
    for block in blocks:
        if re.match(r"(?:local)?rule pretrain:", block.strip()):
            run_id = re.search(r"run_id=([\w-]+)", block).group(1)
            inputs[run_id] = re.search(r"input: (.*)", block).group(1).split(", ")
    assert set(inputs) == {run.run_id for run in trained} and len(inputs) > 50
    for run_id, files in inputs.items():
        assert "data/paper/corpora/slimpajama" in files, run_id
        assert ("data/paper/corpora/fineweb" in files) == (run_id in FIXED_RUNS), (run_id, files)
    (corpora,) = [b for b in blocks if re.match(r"(?:local)?rule data_corpora:", b.strip())]
    assert re.search(r"output: (.*)", corpora).group(1).split(", ") == ["data/paper/corpora/slimpajama",
                                                                        "data/paper/corpora/fineweb"]
