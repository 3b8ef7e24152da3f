"""The packaged lm-eval stand-ins: every thesis task gets a valid local-JSON task that lm-eval loads,
rows mean what they claim, builds are seeded, and the reference rows come from the data."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch
import yaml
from lm_eval.tasks import TaskManager
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch import nn

from leanlm.lm_eval.baselines import random_guess_and_majority
from leanlm.lm_eval.standins import THESIS_TASKS, build_lm_eval_tasks
from leanlm.errors import ConfigError, DataError
from leanlm.lm_eval.adapter import _task_specs, run_lm_eval

NAMES = ["Alderby", "Brookfield", "Carrowmore", "Dunmore", "Elsworth", "Fenwick", "Glenholm", "Harwood"]
KINDS = ["a market town", "a small river", "a coastal village", "an old castle", "a railway junction",
         "a limestone quarry", "a wooden bridge", "a famous garden"]
NOUNS = ["harbour", "market", "chapel", "orchard", "meadow", "bridge", "library", "windmill"]
ADJECTIVES = ["quiet", "busy", "ancient", "narrow", "pleasant", "crowded"]
VERBS = ["visit", "paint", "repair", "describe", "photograph", "admire"]
TIMES = ["summer", "winter", "morning", "evening", "autumn"]
HELD_OUT_REVIEWS = [("A warm and clever film with a wonderful cast.", "positive"),
                    ("Dull, predictable and far too long.", "negative"),
                    ("The funniest film of the year.", "positive"),
                    ("A tedious waste of a fine cast.", "negative"),
                    ("An unforgettable performance in a joyful story.", "positive")]


def corpus(n_docs: int = 8, seed: int = 0) -> list[str]:
    """Small English documents: a definition of the place, then sentences that reuse a few content words."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        name, kind = NAMES[i], KINDS[i]
        sentences = [f"{name} is {kind} in the northern hills."]
        for _ in range(14):
            noun, adj, verb, time = (rng.choice(NOUNS), rng.choice(ADJECTIVES), rng.choice(VERBS), rng.choice(TIMES))
            sentences.append(rng.choice([
                f"The {noun} of {name} was {adj} during the {time}.",
                f"Visitors often {verb} the {adj} {noun} near the {rng.choice(NOUNS)}.",
                f"Many people in {name} {verb} the old {noun} every {time}.",
                f"In the {time} the {noun} looked {adj} and the {rng.choice(NOUNS)} looked {rng.choice(ADJECTIVES)}.",
            ]))
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_eval_tasks")
    paths = build_lm_eval_tasks(corpus(), {"sentiment": HELD_OUT_REVIEWS}, out, seed=3, max_examples=12)
    return out, paths


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


def rows(path):
    return [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]


def test_every_thesis_task_has_a_stand_in():
    assert set(THESIS_TASKS.values()) == {"arc_easy", "boolq", "copa", "piqa", "sciq", "rte", "hellaswag",
                                          "wikitext", "lambada_openai"}
    assert all(name.startswith("leanlm_") for name in THESIS_TASKS)


def test_generated_files_name_no_absolute_path(built):
    # The task folder is DVC-tracked: an absolute (temporary) path in it would change its hash per machine.
    out, paths = built
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert str(out) not in text and str(out.resolve()) not in text, path.name
    for name, yaml_path in paths.items():
        files = yaml.safe_load(yaml_path.read_text())["dataset_kwargs"]["data_files"]
        assert files == {"test": f"{name}.jsonl"}


@pytest.mark.parametrize("how", ["lm-eval run from the task folder", "our adapter from elsewhere"])
def test_builder_writes_tasks_that_lm_eval_loads(built, how, monkeypatch, tmp_path):
    out, paths = built
    assert set(paths) == set(THESIS_TASKS)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["skipped"] == {}
    assert {n: m["thesis_task"] for n, m in manifest["tasks"].items()} == THESIS_TASKS
    if how.startswith("lm-eval"):  # lm-eval's own loading resolves data_files against the working directory
        monkeypatch.chdir(out)
        loaded = TaskManager(include_path=str(out), include_defaults=False).load(sorted(paths))["tasks"]
    else:  # run_lm_eval's specs: resolved against the YAML's folder, whatever the working directory
        monkeypatch.chdir(tmp_path)
        specs, needs_defaults = _task_specs(sorted(paths), out)
        assert not needs_defaults
        loaded = TaskManager(include_defaults=False).load(specs)["tasks"]
    assert set(loaded) == set(paths)
    for name, task in loaded.items():
        docs = list(task.test_docs())
        assert 0 < len(docs) <= 12 and len(docs) == manifest["tasks"][name]["examples"]
        for doc in docs:
            if task.OUTPUT_TYPE == "multiple_choice":
                choices, target = task.doc_to_choice(doc), task.doc_to_target(doc)
                assert 0 <= target < len(choices) and len(set(choices)) == len(choices)
                assert task.doc_to_text(doc) == doc["query"]
            elif task.OUTPUT_TYPE == "loglikelihood_rolling":
                assert task.doc_to_target(doc) == doc["page"]
            else:  # LAMBADA: the context, then " " + the last word, gives the passage back
                assert task.doc_to_text(doc) + task.doc_to_target(doc) == doc["text"]


def test_rows_mean_what_they_claim(built):
    out, paths = built
    docs = corpus()
    for row in rows(paths["leanlm_definition"]):  # the gold answer is the asked-about place's own definition
        name = row["query"].split("What is ")[1].split("?")[0]
        assert row["choices"][row["label"]] == f"{KINDS[NAMES.index(name)]} in the northern hills"
    for row in rows(paths["leanlm_next_sentence_4way"]):
        assert len(row["choices"]) == 4
        assert any(f"{row['query']} {row['choices'][row['label']]}" in d for d in docs)
    for row in rows(paths["leanlm_next_sentence_2way"]) + rows(paths["leanlm_sentence_completion"]):
        assert len(row["choices"]) == 2
        assert any(f"{row['query']} {row['choices'][row['label']]}" in d for d in docs)
    for row in rows(paths["leanlm_cloze_support"]):
        support, question = row["query"].split("\nQuestion: ")
        answer = row["choices"][row["label"]]
        assert "___" in question and answer in {w.strip(".,") for w in support.split()}
        assert answer not in {w.strip(".,") for w in question.split()}  # blanked, not left in view
    for row in rows(paths["leanlm_entailment"]):
        assert row["choices"] == ["True", "False"]
        premise, hypothesis = row["query"].split("\nQuestion: ")
        words = hypothesis.removesuffix(" True or False?\nAnswer:").split()
        dropped = [w for w in words if w not in premise.split()]
        assert (row["label"] == 0) == (dropped == [])  # True: only words of the premise
    for row in rows(paths["leanlm_lambada"]):
        *context, last = row["text"].split(" ")
        assert last.isalpha() and last.lower() in {w.strip(".,").lower() for w in context}
    sentiment = rows(paths["leanlm_sentiment"])
    assert sorted((r["query"].removesuffix("\nSentiment:"), r["choices"][r["label"]]) for r in sentiment) == \
        sorted(HELD_OUT_REVIEWS)
    assert all(len(r["page"].split()) >= 100 for r in rows(paths["leanlm_wikitext"]))


def test_builds_are_seeded(built, tmp_path):
    out, paths = built
    again = build_lm_eval_tasks(corpus(), {"sentiment": HELD_OUT_REVIEWS}, tmp_path / "again", seed=3, max_examples=12)
    other = build_lm_eval_tasks(corpus(), {"sentiment": HELD_OUT_REVIEWS}, tmp_path / "other", seed=4, max_examples=12)
    assert all(rows(paths[n]) == rows(again[n]) for n in paths)
    assert any(rows(paths[n]) != rows(other[n]) for n in paths)


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(DataError, match="sentiment"):
        build_lm_eval_tasks(corpus(2), {"sentiment": [("Great.", "positive")]}, tmp_path, 0, 5)
    with pytest.raises(ConfigError, match="Bad Name"):
        build_lm_eval_tasks(corpus(2), {"Bad Name": HELD_OUT_REVIEWS}, tmp_path, 0, 5)
    paths = build_lm_eval_tasks(["Too short."], None, tmp_path / "few", 0, 5)
    assert paths == {}
    assert "leanlm_wikitext" in json.loads((tmp_path / "few" / "MANIFEST.json").read_text())["skipped"]


def word_tokenizer(texts) -> Tokenizer:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    return tok


def test_random_guess_and_majority_known_values(built):
    mc = [{"query": "q", "choices": ["a", "b"], "label": 0}, {"query": "q", "choices": ["a", "b"], "label": 0},
          {"query": "q", "choices": ["a", "b", "c", "d"], "label": 1}]
    rows_ = random_guess_and_majority(mc)
    assert rows_["random_guess"]["acc"] == pytest.approx((0.5 + 0.5 + 0.25) / 3)
    assert rows_["majority"]["acc"] == pytest.approx(2 / 3)
    tok = word_tokenizer(["one two three four five six"])
    v = tok.get_vocab_size()
    pages = random_guess_and_majority([{"page": "one two three"}, {"page": "four five six"}], tok)
    assert pages["random_guess"]["word_perplexity"] == pytest.approx(v)  # one token per word
    assert pages["random_guess"]["bits_per_byte"] == pytest.approx(6 * math.log2(v) / 26)
    assert pages["majority"] is None
    last = random_guess_and_majority([{"text": "one two three"}], tok)
    assert last["random_guess"] == {"perplexity": pytest.approx(v), "acc": pytest.approx(1 / v)}
    out, paths = built  # from a task YAML: the same as from its rows
    assert random_guess_and_majority(paths["leanlm_definition"]) == random_guess_and_majority(rows(paths["leanlm_definition"]))
    assert random_guess_and_majority(paths["leanlm_wikitext"])["random_guess"] is None  # no tokenizer, no LM row


class UniformLM(nn.Module):
    """Equal logits for every token: its scores are the random-guess rows by construction."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.config = SimpleNamespace(max_position=16)
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None):
        return {"logits": torch.zeros(*input_ids.shape, self.vocab_size)}


def test_uniform_model_scores_the_random_guess_rows(built):
    out, paths = built
    tok = word_tokenizer(corpus())
    tasks = ["leanlm_wikitext", "leanlm_lambada", "leanlm_next_sentence_2way"]
    results = run_lm_eval(UniformLM(tok.get_vocab_size()), tok, tasks, str(out), batch_size=4, bootstrap_iters=0)
    wiki = random_guess_and_majority(paths["leanlm_wikitext"], tok)["random_guess"]
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert results["leanlm_wikitext"][metric] == pytest.approx(wiki[metric], rel=1e-5)
    lambada = random_guess_and_majority(paths["leanlm_lambada"], tok)["random_guess"]
    assert results["leanlm_lambada"]["perplexity"] == pytest.approx(lambada["perplexity"], rel=1e-5)
    assert results["leanlm_lambada"]["acc"] == 0.0  # argmax of equal logits is token 0, [PAD]
    assert 0.0 <= results["leanlm_next_sentence_2way"]["acc"] <= 1.0
