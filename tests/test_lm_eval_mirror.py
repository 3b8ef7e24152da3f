"""Chapter 4's lm-eval tasks on a hub mirror: lm-eval's own task definitions (prompts, options, targets,
process_docs, metrics) read the fixture data of the nine datasets (leanlm.data.fixtures.lm_eval) in the
hub's exact schemas, through the redirect of leanlm.lm_eval.mirror, offline; the runners report the
metrics lm-eval's configs declare; a mirror lacking a task names it and the fill command; `leanlm mirror`
saves what lm-eval's configs read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jinja2
import jinja2.meta
import pytest
import torch
from datasets import ClassLabel, Features, Sequence, Value, load_from_disk

from leanlm.config import load_config
from leanlm.data.sources import hub
from leanlm.data.plumbing import mirror
from leanlm.data.fixtures.lm_eval import FIXTURES, write_lm_eval_fixtures
from leanlm.lm_eval.mirror import check_mirrored, redirected_tasks
from leanlm.data.tasks import get_task, tasks_in_family
from leanlm.errors import DataError
from leanlm.runs import runs
from leanlm.lm_eval.baselines import evaluated_docs, load_lm_eval_tasks
from leanlm.lm_eval.configs import metric_names, task_config, task_dataset

NINE = ["arc_easy", "boolq", "copa", "piqa", "sciq", "rte", "hellaswag", "wikitext", "lambada_openai"]
S = Value("string")
# The hub's own features of each dataset/config (its dataset_info), written out here, not taken from
# the fixture module, so the two are checked against each other.
HUB_FEATURES = {
    ("allenai/ai2_arc", "ARC-Easy"): Features({"id": S, "question": S, "choices": Sequence({"text": S, "label": S}),
                                               "answerKey": S}),
    ("aps/super_glue", "boolq"): Features({"question": S, "passage": S, "idx": Value("int32"),
                                           "label": ClassLabel(names=["False", "True"])}),
    ("aps/super_glue", "copa"): Features({"premise": S, "choice1": S, "choice2": S, "question": S,
                                          "idx": Value("int32"), "label": ClassLabel(names=["choice1", "choice2"])}),
    ("baber/piqa", None): Features({"goal": S, "sol1": S, "sol2": S, "label": ClassLabel(names=["0", "1"])}),
    ("allenai/sciq", None): Features({"question": S, "distractor3": S, "distractor1": S, "distractor2": S,
                                      "correct_answer": S, "support": S}),
    ("nyu-mll/glue", "rte"): Features({"sentence1": S, "sentence2": S,
                                       "label": ClassLabel(names=["entailment", "not_entailment"]),
                                       "idx": Value("int32")}),
    ("Rowan/hellaswag", None): Features({"ind": Value("int32"), "activity_label": S, "ctx_a": S, "ctx_b": S, "ctx": S,
                                         "endings": Sequence(S), "source_id": S, "split": S, "split_type": S,
                                         "label": S}),
    ("EleutherAI/wikitext_document_level", "wikitext-2-raw-v1"): Features({"page": S}),
    ("EleutherAI/lambada_openai", "default"): Features({"text": S}),
}


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    write_lm_eval_fixtures(root)
    return root


def _saved(root: Path, key) -> object:
    return load_from_disk(str(mirror.dataset_dir(root, *key)))


# ------------------------------------------------------------------------------------ schemas and names
def test_the_nine_tasks_and_their_datasets_are_lm_evals():
    specs = tasks_in_family("lm_eval") + tasks_in_family("analysis")
    assert sorted({spec.hub["task"] for spec in specs}) == sorted(NINE)
    for spec in specs:  # the task table names the dataset lm-eval's own config reads
        source = task_dataset(spec.hub["task"])
        assert (spec.hub["dataset"], spec.hub["config"]) == (source.path, source.name), spec.name
    assert {(task_dataset(task).path, task_dataset(task).name): task for task in NINE} == {
        key: task for key, (task, *_rest) in FIXTURES.items()}


def _template_fields(value) -> set[str]:
    """Columns a doc_to_* entry of lm-eval's config reads: a Jinja template's variables, or a bare column
    name; nothing for constants and functions."""
    if not isinstance(value, str) or not value or "/" in value:  # a !function, unresolved, is a path
        return set()
    if "{{" in value:
        return jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(value))
    return {value}


def test_fixtures_have_the_hubs_features_and_the_fields_lm_eval_reads(filled):
    for key, features in HUB_FEATURES.items():
        task = FIXTURES[key][0]
        saved = _saved(filled, key)
        config = task_config(task)
        assert set(task_dataset(task).splits) <= set(saved), (task, list(saved))
        for split, data in saved.items():
            assert data.features == features, (key, split)
            assert list(data.features) == list(features), (key, split)  # the hub's column order
            assert 8 <= len(data) <= 20
        if config.get("process_docs"):  # its fields are the ones process_docs makes (checked by running it)
            continue
        for field in ("doc_to_text", "doc_to_target", "doc_to_choice"):
            assert _template_fields(config.get(field)) <= set(features), (task, field, config.get(field))


def test_fixtures_are_deterministic(tmp_path):
    write_lm_eval_fixtures(tmp_path / "a")
    write_lm_eval_fixtures(tmp_path / "b")
    for key in HUB_FEATURES:
        a, b = _saved(tmp_path / "a", key), _saved(tmp_path / "b", key)
        assert {s: a[s].to_list() for s in a} == {s: b[s].to_list() for s in b}


# ------------------------------------------------------------------------- lm-eval's tasks on the mirror
def test_lm_evals_own_tasks_read_the_mirror_offline(filled, offline_with):
    offline_with(filled)
    with redirected_tasks(NINE, "paper") as include:
        caches = {Path(config["dataset_kwargs"]["cache_dir"]) for config in include.values()}
        tasks = load_lm_eval_tasks(NINE, include)
        docs = {name: evaluated_docs(task) for name, task in tasks.items()}
        for name, task in tasks.items():
            assert task.config.output_type == task_config(name)["output_type"]
            assert [m["metric"] for m in task.config.metric_list] == metric_names(name)
            key = (task_dataset(name).path, task_dataset(name).name)
            scored = FIXTURES[key][3]
            assert len(docs[name]) == len(_saved(filled, key)[scored]), name
        arc = docs["arc_easy"][0]
        assert tasks["arc_easy"].doc_to_text(arc) == f"Question: {arc['question']}\nAnswer:"
        assert tasks["arc_easy"].doc_to_choice(arc) == arc["choices"]["text"]
        numbered = next(d for d in docs["arc_easy"] if d["choices"]["label"][0] == "1")  # ARC's other label style
        assert tasks["arc_easy"].doc_to_target(numbered) == numbered["choices"]["label"].index(numbered["answerKey"])
        copa = docs["copa"][0]  # lm-eval's utils.py: the premise without its period, then the connective
        connective = {"cause": "because", "effect": "therefore"}[copa["question"]]
        assert tasks["copa"].doc_to_text(copa) == f"{copa['premise'][:-1]} {connective}"
        hellaswag = docs["hellaswag"]  # lm-eval's process_docs: query, choices without WikiHow's markers
        assert all("[" not in choice for doc in hellaswag for choice in doc["choices"])
        assert {doc["gold"] for doc in hellaswag} <= {0, 1, 2, 3}
        page = docs["wikitext"][0]  # lm-eval's detokeniser
        assert "@-@" in page["page"] and "@-@" not in tasks["wikitext"].doc_to_target(page)
        assert tasks["boolq"].doc_to_choice(docs["boolq"][0]) == ["no", "yes"]
        assert tasks["rte"].doc_to_choice(docs["rte"][0]) == ["True", "False"]
    assert caches and not any(cache.exists() for cache in caches)  # datasets' copy of the data is not kept


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from leanlm.data.fixtures.lm_eval import fixture_datasets

    texts = [" ".join(str(v) for v in row.values()) for data in fixture_datasets().values()
             for split in data.values() for row in split]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    return tokenizer


def _tiny_decoder(vocab_size: int):
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.qwen import QwenForCausalLM

    torch.manual_seed(0)
    config = ModelConfig(backbone="qwen", vocab_size=vocab_size, n_layers=2, d_model=16, n_heads=2, head_dim=8,
                         d_ff=32, max_position=64, type_vocab_size=0, dropout=0.0, attention_dropout=0.0)
    return QwenForCausalLM(config).eval()


@pytest.fixture
def paper_runner(filled, offline_with, monkeypatch):
    """The paper profile (hub source) with the fixture mirror, and the runners' model and tokenizer
    loading replaced by a tiny untrained decoder of ours (what is under test is where the data comes
    from and what lm-eval reports)."""
    import leanlm.runners.analysis as analysis_runner
    import leanlm.runners.lm_eval as lm_eval_runner
    import leanlm.training.run_tokenizer as run_tokenizer

    offline_with(filled)
    tokenizer = _tokenizer()
    model = _tiny_decoder(tokenizer.get_vocab_size())
    for module in (lm_eval_runner, analysis_runner):
        monkeypatch.setattr(module, "load_evaluated_model", lambda config, run_id: model)
    monkeypatch.setattr(run_tokenizer, "evaluation_tokenizer", lambda config, run_id, fallback: fallback)
    lm_eval_runner._SCORES.clear()
    config = load_config("params/paper.yaml")
    assert config["source"] == "hub"
    config["finetune"]["lm_eval"].update(batch_size=8, limit=None, bootstrap_iters=2)
    config["finetune"]["analysis"].update(batch_size=8, limit=None, context_lengths=[16, 32], indicator_tokens=32,
                                          indicator_sequences=2)
    run_id = next(r.run_id for r in runs(config) if r.experiment == "ch4_uniform")
    yield config, run_id, tokenizer
    lm_eval_runner._SCORES.clear()


def test_the_runners_report_lm_evals_metrics_from_the_mirror(paper_runner):
    from leanlm.runners.analysis import AttentionAnalysisRunner
    from leanlm.runners.lm_eval import LMEvalRunner

    import leanlm.runners.lm_eval as lm_eval_runner

    config, run_id, tokenizer = paper_runner
    for task in config["finetune"]["lm_eval"]["tasks"]:
        spec = get_task(task)
        result = LMEvalRunner()(config, run_id, "lm_eval", task, 0, tokenizer)
        name = spec.hub["task"]
        assert result["lm_eval_task"] == name
        declared = metric_names(name)  # lm-eval's own metric list, as its config declares it
        (scores, *_), = lm_eval_runner._SCORES.values()  # what lm-eval itself reported, before our checks
        assert set(declared) <= set(scores[name]), (name, sorted(scores[name]))
        assert [m for m in result["metrics"] if not m.endswith("_stderr")] == declared
        assert all(result["metrics"][m] == result["metrics"][m] for m in declared)  # numbers, not NaN
        key = (task_dataset(name).path, task_dataset(name).name)
        assert result["examples"] == len(_saved(mirror.active_mirror(), key)[FIXTURES[key][3]])
        assert result["baselines"]["examples"] == result["examples"]
    analysis = AttentionAnalysisRunner()(config, run_id, "analysis", "attention_analysis", 0, tokenizer)
    assert analysis["lm_eval_task"] == "wikitext"
    assert analysis["context_length_perplexity"]["documents"] == len(
        _saved(mirror.active_mirror(), ("EleutherAI/wikitext_document_level", "wikitext-2-raw-v1"))["test"])
    assert analysis["metrics"]["perplexity"] > 1


# ------------------------------------------------------------------------------------- missing items
def test_a_mirror_without_a_task_names_it_and_the_fill_command(filled, offline_with, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(filled, partial)
    shutil.rmtree(mirror.dataset_dir(partial, "EleutherAI/lambada_openai", "default"))
    shutil.rmtree(mirror.dataset_dir(partial, "aps/super_glue", "boolq") / "train")
    offline_with(partial)
    with pytest.raises(DataError, match=r"no dataset EleutherAI/lambada_openai \(config default\), which lm-eval "
                                        r"task 'lambada_openai' reads.*leanlm mirror --params params/paper\.yaml"):
        with redirected_tasks(["arc_easy", "lambada_openai"], "paper"):
            pass
    with pytest.raises(DataError, match=r"lacks split\(s\) train of aps/super_glue \(config boolq\), which lm-eval "
                                        r"task 'boolq' reads .*leanlm mirror"):
        check_mirrored(["boolq"], "paper")
    check_mirrored(["arc_easy", "wikitext"], "paper")  # the tasks the mirror holds pass


def test_the_tasks_stage_checks_the_mirror_before_any_training(filled, offline_with, tmp_path, monkeypatch):
    from leanlm.lm_eval.stage import build_lm_eval_dir

    partial = tmp_path / "partial"
    shutil.copytree(filled, partial)
    shutil.rmtree(mirror.dataset_dir(partial, "Rowan/hellaswag", None))
    offline_with(partial)
    config = load_config("params/paper.yaml")
    with pytest.raises(DataError, match=r"no dataset Rowan/hellaswag \(config None\), which lm-eval task 'hellaswag'"):
        build_lm_eval_dir(config, tmp_path / "tasks")
    offline_with(filled)
    out = build_lm_eval_dir(config, tmp_path / "tasks")
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert sorted(set(manifest["tasks"].values())) == sorted(NINE)
    assert str(filled) not in (out / "MANIFEST.json").read_text()  # no machine path in a tracked file


# ------------------------------------------------------------------------------------------ filling
def test_leanlm_mirror_saves_what_lm_evals_configs_read(tmp_path, monkeypatch):
    import datasets

    from leanlm.data.plumbing import mirror_fill
    from leanlm.data.fixtures.lm_eval import fixture_datasets

    config = load_config("params/paper.yaml")
    config["finetune"] = {family: config["finetune"][family] for family in ("lm_eval", "analysis")}
    config["data"] = {**config["data"], "corpora": {}, "tokenizers": {}, "tokenizer": {"kind": "wordpiece"}}
    for var in hub._OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub, "_reachable", True)
    hub_data, calls = fixture_datasets(), []

    def load_dataset(path, name=None, **kwargs):  # the hub, as lm-eval calls it
        calls.append((path, name, kwargs, mirror.active_mirror()))
        return hub_data[(path, name)]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(mirror_fill, "_corpus_items", lambda config, root: [])
    monkeypatch.setattr(mirror_fill, "_model_items", lambda config, root: [])
    record = mirror_fill.fill_mirror(config, tmp_path / "m")
    assert {(p, n) for p, n, _, _ in calls} == set(HUB_FEATURES)
    assert len(calls) == len(HUB_FEATURES) and {active for *_, active in calls} == {None}
    assert sorted(record["items"]["lm_eval"]) == sorted(
        str(mirror.dataset_dir(Path(""), *key)) for key in HUB_FEATURES)
    for key, features in HUB_FEATURES.items():
        assert _saved(tmp_path / "m", key)["test"].features == features
    mirror_fill.fill_mirror(config, tmp_path / "m")  # items already there are kept, not fetched again
    assert len(calls) == len(HUB_FEATURES)
