"""Chapter 4 in the pipeline: the matrix in both profiles, the lm-eval and analysis families end to end on a
tiny model (tasks stage -> pretraining with FixedSeqQK's fixed text -> lm-eval on local tasks -> analysis ->
skip -> aggregation with the Rnd. Guess / Majority rows), and the pieces on hand-built inputs."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from leanlm.config import load_config

from leanlm.errors import ConfigError, DataError
from leanlm.modeling.layouts import TABLE_4_11_LAYOUTS, skip_set
from leanlm.modeling.mixers import CH4_VARIANTS
from leanlm.modeling.qwen_sizes import TABLE_4_10
from leanlm.runs import get_run, pretrain_settings, runs

SIX = CH4_VARIANTS[1:]
THESIS_COLUMNS = ["ARC-E", "BoolQ", "COPA", "PiQA", "SciQ", "RTE", "HellaSwag", "Wiki", "LAMBADA"]  # Table 4.1


def _runs(config, experiment):
    return {r.name: r for r in runs(config) if r.experiment == experiment}


# ---------------------------------------------------------------------------------------------- matrix
def test_ch4_matrix_in_both_profiles(scratch_root):
    for profile in ("smoke", "paper"):
        config = load_config(f"params/{profile}.yaml")
        uniform, hybrid, skip = (_runs(config, f"ch4_{e}") for e in ("uniform", "hybrid", "skip"))
        assert list(uniform) == CH4_VARIANTS and {r.model["layout"] for r in uniform.values()} == {"uniform"}
        assert [r.attention for r in uniform.values()] == CH4_VARIANTS
        assert list(hybrid) == SIX and {r.model["layout"] for r in hybrid.values()} == {"hybrid"}
        assert {n: (r.evaluate_from, r.skip_simple_layers) for n, r in skip.items()} == {
            v: (f"ch4_hybrid-{v}", True) for v in SIX}
        assert all(r.model == hybrid[n].model for n, r in skip.items())
        sizes = _runs(config, "ch4_sizes")
        assert {n.split("_")[0] for n in sizes} == {"70m", "160m", "500m"}
        assert {r.evaluate_from for n, r in sizes.items() if n.startswith("500m")} == {
            *(f"ch4_uniform-{v}" for v in CH4_VARIANTS), *(f"ch4_hybrid-{v}" for v in SIX)}
        assert {(r.attention, r.model["layout"]) for n, r in sizes.items() if n.startswith("70m")} == {
            *((v, "uniform") for v in CH4_VARIANTS), *((v, "hybrid") for v in SIX)}
        layouts = _runs(config, "ch4_layouts")
        assert len(layouts) == 18 and {r.model["layout"] for r in layouts.values()} == (
            set(TABLE_4_11_LAYOUTS) - {"even"}) | {"hybrid"}
        assert {n.split("_")[0] for n in layouts} == {"pct25" if x == "25%" else x for x in TABLE_4_11_LAYOUTS}
        for name, experiment in (("gqa", "ch4_gqa"), ("1_7b", "ch4_1_7b")):
            table = _runs(config, experiment)
            assert {(r.attention, r.model["layout"]) for r in table.values()} == {
                ("standard", "uniform"), ("non_approximate", "uniform"), ("rnd_emb_qk", "uniform"),
                ("non_approximate", "hybrid"), ("rnd_emb_qk", "hybrid")}
        assert {r.model["n_kv_heads"] for r in _runs(config, "ch4_gqa").values()} == {2}
        assert {r.model["qk_norm"] for r in _runs(config, "ch4_1_7b").values()} == {True}


def test_paper_profile_follows_tables_4_9_and_4_10(scratch_root):
    config = load_config("params/paper.yaml")
    for name, row in zip(("qwen_70m", "qwen_160m", "qwen_500m", "qwen_1_7b"), TABLE_4_10.values()):
        size = config["models"][name]
        assert (size["d_model"], size["d_ff"], size["n_layers"], size["n_heads"]) == (
            row["hidden"], row["intermediate"], row["layers"], row["heads"])
        assert size.get("n_kv_heads", size["n_heads"]) == row["kv_heads"] and size["max_position"] == 2048
    budgets = {"ch4_uniform-standard": (15e9, 4e-4), "ch4_1_7b-standard": (45e9, 3e-4)}
    for run_id, (tokens, lr) in budgets.items():
        s = pretrain_settings(config, get_run(config, run_id))
        per_step = s["batch_size"] * s["grad_accum"] * s["seq_len"]
        assert per_step == 256 * 2048 and s["steps"] == math.ceil(tokens / per_step)  # DESIGN §8's budget
        assert (s["lr"], s["schedule"], s["warmup_steps"], s["weight_decay"], s["clip_norm"]) == (
            lr, "cosine", 2000, 0.1, 1.0)
        assert (tuple(s["adam_betas"]), s["adam_eps"]) == ((0.9, 0.9999), 1e-8)
    from leanlm.data.tasks import tasks_in_family

    specs = tasks_in_family("lm_eval")
    assert [s.thesis_name for s in specs] == THESIS_COLUMNS
    assert [s.hub["task"] for s in specs] == ["arc_easy", "boolq", "copa", "piqa", "sciq", "rte", "hellaswag",
                                               "wikitext", "lambada_openai"]
    assert config["finetune"]["lm_eval"]["tasks"] == [s.name for s in specs]


def _edit_ch4(root: Path, experiment: str, run: str, **fields) -> None:
    path = root / "params" / "experiments" / "ch4.yaml"
    doc = yaml.safe_load(path.read_text())
    doc[experiment]["runs"][run].update(fields)
    path.write_text(yaml.safe_dump(doc))


def test_evaluate_from_must_describe_its_target(scratch_root):
    _edit_ch4(scratch_root, "ch4_skip", "mlp", layout="odd")
    with pytest.raises(ConfigError, match="ch4_skip-mlp evaluates ch4_hybrid-mlp's model.*layout"):
        load_config("params/smoke.yaml")


def test_skip_needs_a_hybrid(scratch_root):
    _edit_ch4(scratch_root, "ch4_uniform", "mlp", skip_simple_layers=True)
    with pytest.raises(ConfigError, match="ch4_uniform-mlp has skip_simple_layers.*no hybrid"):
        load_config("params/smoke.yaml")


def test_task_names_per_source():
    from leanlm.lm_eval.stage import lm_eval_task_name
    from leanlm.lm_eval.standins import THESIS_TASKS
    from leanlm.data.tasks import get_task, tasks_in_family

    assert lm_eval_task_name(get_task("lm_eval_arc_easy"), "hub") == "arc_easy"
    assert lm_eval_task_name(get_task("lm_eval_arc_easy"), "packaged") == "leanlm_definition"
    assert {lm_eval_task_name(s, "packaged") for s in tasks_in_family("lm_eval")} == set(THESIS_TASKS)
    assert lm_eval_task_name(get_task("attention_analysis"), "packaged") == "leanlm_wikitext"


# ---------------------------------------------------------------------------------------------- pieces
def test_lm_eval_metric_definitions():
    from leanlm.evaluation.metrics import compute

    assert compute("acc", [1, 0, 2], [1, 1, 2]) == pytest.approx(2 / 3)
    nll, words, n_bytes = [6.0, 4.0], [3, 2], [10, 10]
    assert compute("word_perplexity", nll, words) == pytest.approx(math.exp(2.0))
    assert compute("bits_per_byte", nll, n_bytes) == pytest.approx(0.5 / math.log(2))


def test_fixed_sequence_is_the_first_long_enough_held_out_document():
    from leanlm.routes.fixed_text import fixed_sequence_ids

    class Chars:  # one token per character
        def encode(self, text, add_special_tokens=False):
            return type("E", (), {"ids": [ord(c) for c in text]})()

    docs = [{"doc_id": "a", "text": "abc"}, {"doc_id": "b", "text": "defghij"}, {"doc_id": "c", "text": "klmnopq"}]
    ids, used = fixed_sequence_ids(Chars(), docs, 5)
    assert ids.tolist() == [ord(c) for c in "defgh"] and used == ["b"]
    ids, used = fixed_sequence_ids(Chars(), [{"doc_id": "a", "text": "abc"}, {"doc_id": "b", "text": "de"}], 5)
    assert ids.tolist() == [ord(c) for c in "abcde"] and used == ["a", "b"]
    with pytest.raises(DataError, match="FixedSeqQK needs a fixed text of 9"):
        fixed_sequence_ids(Chars(), docs[:1], 9)


def test_token_windows_read_documents_after_the_prefix():
    from leanlm.evaluation.attention_analysis import token_windows

    windows = token_windows([[1, 2, 3], [4, 5]], prefix_token_id=0, length=3, count=5)
    assert windows.tolist() == [[0, 1, 2], [3, 0, 4]]
    with pytest.raises(DataError, match="fewer than one window"):
        token_windows([[1]], 0, 3, 1)


# ---------------------------------------------------------------------------------------------- end to end
NAMES = ["Alderby", "Brookfield", "Carrowmore", "Dunmore", "Elsworth", "Fenwick", "Glenholm", "Harwood"]
KINDS = ["a market town", "a small river", "a coastal village", "an old castle", "a railway junction",
         "a limestone quarry", "a wooden bridge", "a famous garden"]
NOUNS = ["harbour", "market", "chapel", "orchard", "meadow", "bridge", "library", "windmill"]


def _documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        name = NAMES[i % len(NAMES)]
        sentences = [f"{name} is {KINDS[i % len(KINDS)]} in the northern hills."]
        for _ in range(16):
            noun, other = rng.choice(NOUNS), rng.choice(NOUNS)
            sentences.append(rng.choice([f"The {noun} of {name} was quiet during the summer.",
                                         f"Visitors often visit the old {noun} near the {other}.",
                                         f"Many people in {name} admire the {noun} every morning."]))
        docs.append(" ".join(sentences))
    return docs


TINY = """
profile: tiny
source: packaged
experiments: [ch4_hybrid, ch4_skip]
seeds: [0]
data:
  corpus: {validation_fraction: 0.1, test_fraction: 0.1, split_seed: 1}
  tokenizer: {kind: wordpiece, vocab_size: 300, lowercase: true}
  tasks: {max_train_examples: 50, max_eval_examples: 30, seed: 3, lm_eval_page_words: 120}
models:
  qwen_500m: {backbone: qwen, n_layers: 2, d_model: 16, n_heads: 2, head_dim: 8, d_ff: 32, max_position: 32,
              type_vocab_size: 0, dropout: 0.0}
pretrain:
  causal_lm: {steps: 2, batch_size: 4, grad_accum: 1, seq_len: 16, lr: 1.0e-3, schedule: constant,
              warmup_steps: 0, weight_decay: 0.0, adam_betas: [0.9, 0.999], adam_eps: 1.0e-8, clip_norm: 1.0,
              checkpoint_every: null}
pretrain_variants:
  ch4: {steps: 4, seq_len: 32, schedule: cosine}
finetune:
  lm_eval: {tasks: [lm_eval_arc_easy, lm_eval_wikitext, lm_eval_lambada_openai], batch_size: 8, limit: 6,
            bootstrap_iters: 2}
  analysis: {tasks: [attention_analysis], batch_size: 8, limit: 6, context_lengths: [8, 16, 64],
             indicator_tokens: 16, indicator_sequences: 2}
"""


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory):
    """A tiny profile run through the tasks stage, pretraining, lm_eval, analysis, skip and aggregation."""
    import os
    import shutil

    from leanlm.config import _load_matrix_cached
    from leanlm.data.plumbing.stages import run_stage
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece
    from leanlm.io import write_json, write_jsonl
    from leanlm.reporting.aggregate import main as aggregate
    from leanlm.stages.finetune import finetune
    from leanlm.stages.pretrain import pretrain

    repo = Path(__file__).resolve().parents[1]
    root = tmp_path_factory.mktemp("ch4_root")
    shutil.copytree(repo / "params", root / "params")
    shutil.copytree(repo / "workflow" / "schemas", root / "workflow" / "schemas")
    (root / "params" / "tiny.yaml").write_text(TINY)
    saved = {k: os.environ.get(k) for k in ("LEANLM_ROOT", "DISABLE_MULTIPROC")}
    os.environ.update(LEANLM_ROOT=str(root), DISABLE_MULTIPROC="1")  # lm-eval's bootstrap without a pool
    _load_matrix_cached.cache_clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the pipeline's jobs run (OMP_NUM_THREADS=1); tiny tensors gain nothing
    try:
        data = root / "data" / "tiny"
        splits = {"train": _documents(24, 0), "validation": _documents(3, 1), "test": _documents(8, 2)}
        for split, docs in splits.items():
            write_jsonl(data / "corpus" / f"{split}.jsonl",
                        [{"doc_id": f"{split}:{i}", "source": "wikipedia", "text": d} for i, d in enumerate(docs)])
        write_json(data / "raw" / "MANIFEST.json", {"source": "packaged", "files": {}})
        tokenizer = train_wordpiece(lambda: iter(splits["train"]), 300, True)
        save_tokenizer(tokenizer, data / "tokenizer", {"kind": "wordpiece"})
        config = load_config("params/tiny.yaml")
        run_stage("tasks", config)
        pretrain(config, "ch4_hybrid-fixed_seq_qk")
        for run_id, family in (("ch4_hybrid-fixed_seq_qk", "lm_eval"), ("ch4_hybrid-fixed_seq_qk", "analysis"),
                               ("ch4_skip-fixed_seq_qk", "lm_eval")):
            finetune(config, run_id, family)
        aggregate("tiny")
        yield root, config, tokenizer
    finally:
        torch.set_num_threads(threads)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        _load_matrix_cached.cache_clear()


def _record(root: Path, run_id: str, family: str) -> dict:
    return json.loads((root / "results" / "tiny" / "runs" / run_id / f"{family}.json").read_text())


def test_tasks_stage_writes_the_local_lm_eval_tasks(tiny_pipeline):
    root, _, _ = tiny_pipeline
    manifest = json.loads((root / "data" / "tiny" / "tasks" / "lm_eval" / "MANIFEST.json").read_text())
    assert {"leanlm_definition", "leanlm_wikitext", "leanlm_lambada"} <= set(manifest["tasks"])


def test_fixed_text_is_a_held_out_document_kept_in_the_checkpoint(tiny_pipeline):
    from leanlm.io import read_jsonl
    from leanlm.modeling.checkpoint import load_model

    root, _, tokenizer = tiny_pipeline
    model = load_model(root / "models" / "tiny" / "ch4_hybrid-fixed_seq_qk")
    first = read_jsonl(root / "data" / "tiny" / "corpus" / "validation.jsonl")[0]["text"]
    expected = tokenizer.encode(first, add_special_tokens=False).ids[:32]
    assert model.model.fixed_token_ids.tolist() == expected
    pretrain_record = _record(root, "ch4_hybrid-fixed_seq_qk", "pretrain")
    assert pretrain_record["data"]["fixed_sequence"]["doc_ids"] == ["validation:0"]
    assert pretrain_record["history"] and pretrain_record["pretrain"]["seq_len"] == 32  # the ch4 variant


def test_lm_eval_record(tiny_pipeline):
    root, _, _ = tiny_pipeline
    record = _record(root, "ch4_hybrid-fixed_seq_qk", "lm_eval")
    by_task = {r["task"]: r for r in record["results"]}
    assert list(by_task) == ["lm_eval_arc_easy", "lm_eval_wikitext", "lm_eval_lambada_openai"]
    arc = by_task["lm_eval_arc_easy"]
    assert arc["lm_eval_task"] == "leanlm_definition" and arc["thesis_name"] == "ARC-E"
    assert set(arc["metrics"]) == {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"} and arc["examples"] == 6
    assert 0 <= arc["metrics"]["acc"] <= 1 and arc["primary_metric"] == "acc"
    assert arc["baselines"]["random_guess"] == {"acc": 0.25, "acc_norm": 0.25}
    assert 0.25 <= arc["baselines"]["majority"]["acc"] <= 1
    assert {"word_perplexity", "byte_perplexity", "bits_per_byte"} <= set(by_task["lm_eval_wikitext"]["metrics"])
    lambada = by_task["lm_eval_lambada_openai"]
    assert {"perplexity", "perplexity_stderr", "acc"} <= set(lambada["metrics"])
    assert lambada["baselines"]["majority"] is None and lambada["baselines"]["random_guess"]["perplexity"] > 1


def test_skip_evaluates_the_hybrid_without_its_simple_layers(tiny_pipeline):
    from leanlm.runners.lm_eval import load_evaluated_model

    root, config, _ = tiny_pipeline
    record = _record(root, "ch4_skip-fixed_seq_qk", "lm_eval")
    assert record["evaluate_from"] == "ch4_hybrid-fixed_seq_qk" and record["skip_simple_layers"]
    assert record["model"]["layout"] == "hybrid" and record["model"]["attention"] == "fixed_seq_qk"
    model = load_evaluated_model(config, "ch4_skip-fixed_seq_qk")
    assert model.skip_layers == frozenset(skip_set("hybrid", 2)) == frozenset({0})
    full = _record(root, "ch4_hybrid-fixed_seq_qk", "lm_eval")
    wiki = [{r["task"]: r["primary"] for r in rec["results"]}["lm_eval_wikitext"] for rec in (full, record)]
    assert wiki[0] != wiki[1]  # a different network
    assert not (root / "models" / "tiny" / "ch4_skip-fixed_seq_qk").exists()  # nothing trained


def test_analysis_record(tiny_pipeline):
    root, _, _ = tiny_pipeline
    result = _record(root, "ch4_hybrid-fixed_seq_qk", "analysis")["results"][0]
    ctx = result["context_length_perplexity"]
    assert ctx["lengths"] == [8, 16, 32] and ctx["units"] == "words"  # 64 > max_position; 32 always measured
    wiki = {r["task"]: r for r in _record(root, "ch4_hybrid-fixed_seq_qk", "lm_eval")["results"]}["lm_eval_wikitext"]
    # Same documents, same windows at the full context: lm-eval's word perplexity.
    assert result["metrics"]["perplexity"] == pytest.approx(wiki["metrics"]["word_perplexity"], rel=1e-4)
    layers = result["attention"]["indicators"]["layers"]
    assert [(l["layer"], l["kind"], l["mixer"]) for l in layers] == [(1, "simple", "fixed_seq_qk"),
                                                                    (2, "standard", "standard")]
    for layer in layers:
        assert len(layer["per_head"]["ENTROPY"]) == 2 and set(layer["mean"]) == {
            "ENTROPY", "CONC", "HEADDIV", "LOCFOC_0", "LOCFOC_1", "LOCFOC_2", "LOCFOC_3", "SINK"}
        # A causal map's first query puts all of its weight on the first token.
        assert layer["mean"]["SINK"] >= 1 / 16
    normalised = result["attention"]["indicators"]["normalised"]
    assert {n["ENTROPY"] for n in normalised} <= {0.0, 1.0} and len(normalised) == 2
    for hist in result["attention"]["logits"]["layers"]:
        assert sum(hist["counts"]) + hist["above"] == hist["n"] == 2 * 2 * (16 * 17 // 2)
    assert result["metrics"]["SINK"] == pytest.approx(sum(l["mean"]["SINK"] for l in layers) / 2)


def test_aggregation_holds_the_scores_and_the_baselines(tiny_pipeline):
    root, _, _ = tiny_pipeline
    frame = pd.read_csv(root / "results" / "tiny" / "all_runs.csv")
    lm_eval = frame[frame.family == "lm_eval"]
    assert set(lm_eval.run_id) == {"ch4_hybrid-fixed_seq_qk", "ch4_skip-fixed_seq_qk"}
    assert {"acc", "acc_stderr", "word_perplexity", "perplexity"} <= set(lm_eval.metric)
    assert set(frame[frame.family == "analysis"].metric) >= {"perplexity", "perplexity_ctx8", "ENTROPY", "SINK"}
    baselines = json.loads((root / "results" / "tiny" / "baselines" / "lm_eval.json").read_text())
    assert set(baselines["tasks"]) == {"lm_eval_arc_easy", "lm_eval_wikitext", "lm_eval_lambada_openai"}
    arc = baselines["tasks"]["lm_eval_arc_easy"]
    assert arc["thesis_name"] == "ARC-E" and arc["examples"] == 6 and arc["random_guess"]["acc"] == 0.25


def test_baselines_follow_the_evaluated_documents(tiny_pipeline):
    from leanlm.lm_eval.stage import include_path
    from leanlm.lm_eval.baselines import load_lm_eval_tasks, task_baselines

    root, config, tokenizer = tiny_pipeline
    task = load_lm_eval_tasks(["leanlm_definition"], include_path("tiny", "packaged"))["leanlm_definition"]
    docs = [json.loads(line) for line in (root / "data" / "tiny" / "tasks" / "lm_eval" /
                                          "leanlm_definition.jsonl").read_text().splitlines()][:3]
    labels = [d["label"] for d in docs]
    rows = task_baselines(task, tokenizer, limit=3)
    assert rows["examples"] == 3 and rows["split"] == "test"
    assert rows["majority"]["acc"] == max(labels.count(v) for v in set(labels)) / 3


def test_a_missing_stand_in_is_named_before_evaluating(tiny_pipeline):
    from leanlm.runners.lm_eval import check_local_tasks

    _, config, _ = tiny_pipeline
    check_local_tasks(config, ["leanlm_definition", "leanlm_wikitext"])
    with pytest.raises(DataError, match="leanlm_sentiment: not built"):
        check_local_tasks(config, ["leanlm_sentiment"])
