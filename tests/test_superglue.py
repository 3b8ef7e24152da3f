"""SuperGLUE: the task table, its metrics, the hub mapping (on fixtures in the hub schema), the
packaged stand-ins, and the multiple-choice model and runner on a tiny model end to end."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from leanlm import paths
from leanlm.data.families.glue_standins import BuildContext, StandInSources
from leanlm.data.families.superglue_standins import STANDINS
from leanlm.data.splitting import task_rng
from leanlm.data.task_sets import cap_splits, check_rows
from leanlm.data.tasks import get_task, tasks_in_family
from leanlm.errors import DataError
from leanlm.evaluation.metrics import compute, compute_all

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "superglue"
SUPERGLUE = ["boolq", "cb", "sg_rte", "wic", "multirc", "copa", "wsc"]


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(REPO))


def _rows(config: str, split: str) -> list[dict]:
    path = FIXTURES / config / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# --- the task table ------------------------------------------------------------------------------


def test_family_in_table_3_6_order_with_appendix_3_8_metrics():
    specs = tasks_in_family("superglue")
    assert [s.name for s in specs] == SUPERGLUE
    assert [s.thesis_name for s in specs] == ["BoolQ", "CB", "RTE", "WiC", "MultiRC", "COPA", "WSC"]
    # "F1 score for QQP, CB, MultiRC and SQuAD and accuracy for all other tasks"
    assert {s.name: s.primary_metric for s in specs} == {
        "boolq": "accuracy", "cb": "macro_f1", "sg_rte": "accuracy", "wic": "accuracy",
        "multirc": "f1a", "copa": "accuracy", "wsc": "accuracy"}
    assert get_task("cb").metrics == ["macro_f1", "accuracy"]
    assert get_task("multirc").metrics == ["f1a", "group_em"]
    copa = get_task("copa")
    assert (copa.input_shape, copa.label_kind, copa.num_labels) == ("multiple_choice", "choice", 2)
    assert get_task("cb").label_names == ["entailment", "contradiction", "neutral"]
    assert all(s.hub["dataset"] == "aps/super_glue" for s in specs)


# --- metrics -------------------------------------------------------------------------------------


def test_cb_macro_f1_hand_case():
    # class 0: P = R = 1/2 -> F1 1/2; class 1: P 2/3, R 1 -> 4/5; class 2: never right -> 0
    refs, preds = [0, 0, 1, 1, 2], [0, 1, 1, 1, 0]
    assert compute("macro_f1", preds, refs) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    assert compute("macro_f1", refs, refs) == 1.0


def _multirc_case():
    from leanlm.evaluation.superglue_metrics import attach_groups

    rows = [{"group": g} for g in ["q1", "q1", "q2", "q2", "q2", "q3"]]
    refs = attach_groups(rows, [1, 0, 1, 1, 0, 0])
    preds = attach_groups(rows, [1, 0, 1, 0, 0, 0])  # q2 misses one of its true answers
    return rows, preds, refs


def test_multirc_em_per_question_and_f1a_over_answers():
    rows, preds, refs = _multirc_case()
    assert preds.shape == (6,) and preds.dtype == object  # 1-D: compute() keeps it as it is
    scores = compute_all(["f1a", "group_em"], preds, refs)
    assert scores["group_em"] == pytest.approx(2 / 3)  # q1 and q3 right, q2 not
    assert scores["f1a"] == pytest.approx(0.8)  # P = 2/2, R = 2/3
    # F1a without groups is the same number
    assert compute("f1a", [1, 0, 1, 0, 0, 0], [1, 0, 1, 1, 0, 0]) == pytest.approx(0.8)


def test_group_metric_errors_say_what_is_missing():
    from leanlm.evaluation.superglue_metrics import attach_groups

    rows, preds, refs = _multirc_case()
    with pytest.raises(DataError, match="needs \\(group, label\\) pairs"):
        compute("group_em", [1, 0], [1, 1])
    shuffled = attach_groups(list(reversed(rows)), [1, 0, 1, 0, 0, 0])
    with pytest.raises(DataError, match="different groups"):
        compute("group_em", shuffled, refs)
    with pytest.raises(DataError, match="carry no 'group'"):
        attach_groups([{"group": "q1"}, {}], [0, 1])
    assert attach_groups([{}, {}], (0, 1)) == [0, 1]  # ungrouped tasks pass through unchanged


# --- hub mapping on fixtures in the hub schema ----------------------------------------------------


CONFIG_OF = {"boolq": "boolq", "cb": "cb", "sg_rte": "rte", "wic": "wic", "multirc": "multirc",
             "copa": "copa", "wsc": "wsc.fixed"}


@pytest.mark.parametrize("task", SUPERGLUE)
def test_hub_mapping_gives_the_row_contract(task):
    from leanlm.data.families.superglue import superglue_task_splits

    spec = get_task(task)
    assert spec.hub["config"] == CONFIG_OF[task]
    dataset = {split: _rows(CONFIG_OF[task], split) for split in ("train", "validation", "test")}
    splits, provenance = superglue_task_splits(spec, dataset, seed=13, heldout_fraction=0.1)
    for split, rows in splits.items():
        check_rows(spec, split, rows)
    assert len(splits["train"]) + len(splits["test"]) == len(dataset["train"])
    assert len(splits["validation"]) == len(dataset["validation"])
    assert provenance["hidden_labels_dropped"] == 0  # SuperGLUE's own test split is never read
    assert provenance["config"] == CONFIG_OF[task]


def test_hub_mapping_composes_each_tasks_text():
    from leanlm.data.families.superglue import map_superglue_rows

    def first(task, split="validation"):
        return map_superglue_rows(get_task(task), _rows(CONFIG_OF[task], split))[0][0][1]

    assert first("boolq") == {"idx": 0, "text_a": "The orchestra tours abroad every summer but performs at home in winter.",
                              "text_b": "does the orchestra tour in winter", "label": 0}
    assert first("wic")["text_b"] == "plant: The plant by the window needs sun."
    assert first("wsc")["text_b"] == "Does it refer to the cat?"
    copa = first("copa")
    assert copa["text_b"] == "What was the cause of this?" and copa["choices"] == ["A ball hit it.", "It was cleaned."]
    multirc = map_superglue_rows(get_task("multirc"), _rows("multirc", "validation"))[0]
    assert [row["group"] for _, row in multirc] == ["0-0", "0-0", "0-0", "0-1"]
    assert multirc[2][1]["text_b"] == "What does the shop sell? Shoes"
    assert [row["idx"] for _, row in multirc] == [0, 1, 2, 3]  # the hub's idx is a dict: positions
    hidden = map_superglue_rows(get_task("cb"), _rows("cb", "test"))
    assert hidden == ([], 1)


def test_multirc_held_out_by_paragraph():
    from leanlm.data.families.superglue import superglue_task_splits

    spec = get_task("multirc")
    train = _rows("multirc", "train")
    sides = set()
    for seed in range(40):
        splits, _ = superglue_task_splits(spec, {"train": train, "validation": []}, seed, heldout_fraction=0.1)
        for split in ("train", "test"):
            paragraphs = {row["text_a"] for row in splits[split]}
            other = {row["text_a"] for row in splits["test" if split == "train" else "train"]}
            assert not paragraphs & other
        sides.add(len(splits["test"]))
    assert len(sides) > 1  # the seed moves paragraphs between train and test


def test_hub_mapping_errors_name_the_column_and_the_file():
    from leanlm.data.families.superglue import map_superglue_rows

    broken = [{k: v for k, v in row.items() if k != "word"} for row in _rows("wic", "train")]
    with pytest.raises(DataError, match="no column 'word'.*superglue.yaml, key superglue.wic.hub"):
        map_superglue_rows(get_task("wic"), broken)


def test_hub_rows_through_datasets_json_loader(tmp_path):
    # The nested MultiRC idx arrives as a dict from a real datasets.Dataset too.
    import datasets

    from leanlm.data.families.superglue import superglue_task_splits

    files = {s: str(FIXTURES / "multirc" / f"{s}.jsonl") for s in ("train", "validation")}
    dataset = datasets.load_dataset("json", data_files=files, cache_dir=str(tmp_path))
    splits, _ = superglue_task_splits(get_task("multirc"), dataset, seed=13, heldout_fraction=0.1)
    assert [row["group"] for row in splits["validation"]] == ["0-0", "0-0", "0-0", "0-1"]


def test_family_loader_is_registered_and_fails_fast_offline():
    from leanlm.data.task_sources import FAMILIES

    with pytest.raises(DataError, match="profile 'paper' uses source 'hub' \\(aps/super_glue/wsc.fixed\\)"):
        FAMILIES.get("superglue").load_hub(get_task("wsc"), "paper", 13, 0.0)


# --- packaged stand-ins --------------------------------------------------------------------------


def _synthetic_documents(n_docs: int = 120) -> list[tuple[str, list[str]]]:
    """Prose-like documents with auxiliaries, repeated noun phrases and topic words per document."""
    rng = random.Random(5)
    topics = ["harbour", "museum", "council", "orchestra", "railway", "garden", "factory", "library",
              "festival", "hospital", "bridge", "market"]
    people = ["farmer", "engineer", "teacher", "painter", "sailor", "doctor", "mayor", "writer"]
    verbs = ["repaired", "visited", "described", "painted", "measured", "opened", "inspected", "studied"]
    auxes = ["was", "has", "will", "could", "did not", "is", "had"]
    docs = []
    for d in range(n_docs):
        topic, other = rng.sample(topics, 2)
        sentences = []
        for s in range(8):
            person = rng.choice(people)
            year = 1800 + rng.randrange(220)
            template = rng.randrange(3)
            if template == 0:
                sentences.append(f"The {topic} {rng.choice(auxes)} {rng.choice(verbs)} by a {person} in {year}.")
            elif template == 1:
                sentences.append(f"A {person} {rng.choice(verbs)} the {other} near the {topic}, and the {person} "
                                 f"was tired in {year}.")
            else:
                sentences.append(f"In {year} the {topic} {rng.choice(verbs)} the old {other} for the {person} of "
                                 f"document {d} number {s}.")
        docs.append((f"synthetic:{d}", sentences))
    return docs


@pytest.fixture(scope="module")
def synthetic_sources() -> StandInSources:
    import leanlm.data.families.superglue_standins  # noqa: F401  (registers the builders)

    src = StandInSources(Path("/nonexistent"))
    src.__dict__["prose_documents"] = _synthetic_documents()  # what the cached_property would hold
    return src


def _build(task: str, src: StandInSources) -> dict[str, list[dict]]:
    rng = task_rng(13, task)
    rows = STANDINS.get(task)(src, BuildContext(task, 13, rng))
    return cap_splits(rows, None, None, rng, renumber=True)


PRIORS = {  # share of each label id in train: (low, high), around the real task's
    "boolq": {1: (0.55, 0.70)},
    "cb": {0: (0.36, 0.56), 1: (0.38, 0.58), 2: (0.02, 0.12)},
    "sg_rte": {0: (0.4, 0.6)},
    "wic": {1: (0.4, 0.6)},
    "multirc": {1: (0.35, 0.5)},
    "copa": {0: (0.4, 0.6)},
    "wsc": {1: (0.28, 0.5)},
}


@pytest.mark.parametrize("task", SUPERGLUE)
def test_standins_pass_check_rows_with_plausible_class_balance(task, synthetic_sources):
    spec = get_task(task)
    rows = _build(task, synthetic_sources)
    for split, split_rows in rows.items():
        assert split_rows, f"{task} has no {split} rows"
        check_rows(spec, split, split_rows)
    labels = Counter(r["label"] for r in rows["train"])
    for label, (low, high) in PRIORS[task].items():
        assert low <= labels[label] / len(rows["train"]) <= high, (task, labels)
    texts = {split: {r["text_a"] for r in split_rows} for split, split_rows in rows.items()}
    assert not texts["train"] & (texts["validation"] | texts["test"])  # split by document


def test_standin_rows_are_what_the_yaml_says(synthetic_sources):
    multirc = _build("multirc", synthetic_sources)["train"]
    by_group: dict[str, list[dict]] = {}
    for row in multirc:
        by_group.setdefault(row["group"], []).append(row)
    for group in by_group.values():
        assert len({r["text_a"] for r in group}) == 1 and {r["label"] for r in group} == {0, 1}
        for row in group:  # a true option is a phrase of the paragraph
            phrase = row["text_b"].split("?", 1)[1].strip()
            assert (phrase in row["text_a"]) or row["label"] == 0
    wic = _build("wic", synthetic_sources)["train"]
    for row in wic:
        word, sentence = row["text_b"].split(": ", 1)
        assert word in row["text_a"] and word in sentence
    copa = _build("copa", synthetic_sources)["train"]
    assert {r["text_b"] for r in copa} == {"What was the cause of this?", "What happened as a result?"}


def test_text_rewrites():
    from leanlm.data.families.superglue_standins import pronoun_rewrite, toggle_negation, yes_no_question

    assert yes_no_question("The river froze in 1901.") == "Is it true that the river froze in 1901?"
    assert yes_no_question("Paris is large.") == "Is it true that Paris is large?"
    assert toggle_negation("The mill was closed".split()) == "The mill was not closed".split()
    assert toggle_negation("The mill was not closed".split()) == "The mill was closed".split()
    assert toggle_negation("It wasn't closed".split()) == "It was closed".split()
    assert toggle_negation("Birds sing".split()) is None
    text, noun, others = pronoun_rewrite("A farmer sold the cart to the miller, and the farmer was glad.")
    assert text == "A farmer sold the cart to the miller, and it was glad."
    assert noun == "a farmer" and others == ["the cart", "the miller"]
    # "the farmer market" is no whole noun phrase: "it market" would not be English
    assert pronoun_rewrite("A farmer sold the cart at the farmer market.") is None


REAL_RAW = paths.data_dir("smoke") / "raw"


@pytest.mark.skipif(not (REAL_RAW / "MANIFEST.json").is_file(), reason="the packaged raw files are not fetched here")
def test_real_packaged_text_gives_enough_rows_and_real_priors():
    # The real prose, where the stand-ins must give enough rows in every split and the real priors.
    import leanlm.data.families.superglue_standins  # noqa: F401  (registers the builders)

    src = StandInSources(REAL_RAW)
    src.__dict__["prose_documents"] = src.prose_documents[::4]  # a quarter of the documents: fast enough
    for task in ("boolq", "cb", "wic", "multirc", "copa"):
        rows = _build(task, src)
        assert min(len(r) for r in rows.values()) >= 40, (task, {s: len(r) for s, r in rows.items()})
        labels = Counter(r["label"] for r in rows["train"])
        for label, (low, high) in PRIORS[task].items():
            assert low <= labels[label] / len(rows["train"]) <= high, (task, labels)


# --- the multiple-choice model and runner ----------------------------------------------------------


TINY = dict(n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=64, dropout=0.0,
            attention_dropout=0.0)


def test_multiple_choice_scores_each_pair_on_its_own():
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.models import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=50, **TINY), "multiple_choice").eval()
    ids = torch.randint(5, 50, (3, 2, 7))
    mask = torch.ones_like(ids)
    mask[1, 0, 5:] = 0
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                labels=torch.tensor([0, 1, 1]))
    assert out["logits"].shape == (3, 2) and out["loss"].ndim == 0
    alone = model(input_ids=ids[1:2, :1, :5], attention_mask=mask[1:2, :1, :5])["logits"]
    assert torch.allclose(alone[0, 0], out["logits"][1, 0], atol=1e-5)  # padding and other choices do not leak
    assert model(input_ids=ids)["loss"] is None


def _tokenizer(texts: list[str]):
    from leanlm.data.tokenizer import train_wordpiece

    return train_wordpiece(lambda: texts, 200, True)


def _pretrained(root: Path, tokenizer, run_id: str) -> None:
    from leanlm.modeling.checkpoint import save_checkpoint
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.heads import BertForMLM

    config = ModelConfig(vocab_size=tokenizer.get_vocab_size(), **TINY)
    torch.manual_seed(0)
    save_checkpoint(BertForMLM(config), config, paths.models_dir("smoke") / run_id)


def _write_task(task: str, rows: dict[str, list[dict]]) -> None:
    from leanlm.io import write_jsonl

    for split, split_rows in rows.items():
        check_rows(get_task(task), split, split_rows)
        write_jsonl(paths.data_dir("smoke") / "tasks" / task / f"{split}.jsonl", split_rows)


SETTINGS = dict(tasks=SUPERGLUE, epochs=3, batch_size=8, max_seq_len=32, lr=5e-3,
                schedule="cosine_with_hard_restarts", warmup_ratio=0.06, weight_decay=0.0,
                adam_betas=[0.9, 0.999], adam_eps=1e-6, clip_norm=1.0, eval_every=None,
                early_stopping_patience=2)


def test_multiple_choice_model_takes_over_the_pretrained_encoder(scratch_root):
    from leanlm.modeling.checkpoint import load_model

    tokenizer = _tokenizer(["the cat sat on the mat", "a dog ran in the park"])
    _pretrained(scratch_root, tokenizer, "tiny")
    mlm = load_model(paths.models_dir("smoke") / "tiny")
    model = load_model(paths.models_dir("smoke") / "tiny", kind="multiple_choice")
    assert type(model).__name__ == "BertForMultipleChoice"
    assert torch.equal(model.encoder.layers[0].intermediate.weight, mlm.encoder.layers[0].intermediate.weight)


@pytest.mark.parametrize("held_out", [True, False])
def test_copa_runner_end_to_end(scratch_root, held_out):
    from leanlm.stages.finetune import TASK_RUNNERS

    rng = random.Random(0)
    things = ["kettle", "window", "garden", "letter", "engine", "candle", "bridge", "basket"]

    def row(i):  # the right choice repeats the premise's object: learnable in a few steps
        thing, other = rng.sample(things, 2)
        label = rng.randrange(2)
        right, wrong = f"so the {thing} was fixed", f"so the {other} was fixed"
        return {"idx": i, "text_a": f"the {thing} broke", "text_b": "What happened as a result?",
                "choices": [wrong, right] if label else [right, wrong], "label": label}

    rows = {"train": [row(i) for i in range(48)], "validation": [row(i) for i in range(16)],
            "test": [row(i) for i in range(8)] if held_out else []}
    _write_task("copa", rows)
    tokenizer = _tokenizer([f"the {t} broke so the {t} was fixed what happened as a result" for t in things])
    _pretrained(scratch_root, tokenizer, "tiny")
    runner = TASK_RUNNERS.get("multiple_choice")()
    config = {"profile": "smoke", "finetune": {"superglue": SETTINGS}}
    result = runner(config, "tiny", "superglue", "copa", 0, tokenizer)
    assert result["task"] == "copa" and result["primary_metric"] == "accuracy"
    if held_out:
        assert set(result["metrics"]) == set(result["test_metrics"]) == {"accuracy"}
    else:  # the paper profile trains on the full train split: no test split, no test score
        assert set(result["metrics"]) == {"accuracy"} and result["test_metrics"] is None
    assert 0.0 <= result["primary"] <= 1.0 and result["steps"] == 3 * 6
    assert (result["train_examples"], result["validation_examples"]) == (48, 16)
    assert not (paths.models_dir("smoke") / "tiny" / "finetune" / "copa-seed0").exists()  # scratch removed


def test_multirc_through_the_classification_runner_reports_group_em(scratch_root):
    from leanlm.stages.finetune import TASK_RUNNERS

    def rows(n, offset):
        out = []
        for q in range(n):
            for a, label in (("the red house", 1), ("a blue car", 0), ("the red door", 1)):
                out.append({"idx": len(out), "text_a": "we saw the red house and the red door",
                            "text_b": f"what did we see? {a}", "label": label, "group": f"q{offset + q}"})
        return out

    _write_task("multirc", {"train": rows(8, 0), "validation": rows(4, 100), "test": rows(2, 200)})
    tokenizer = _tokenizer(["we saw the red house and the red door what did we see a blue car"])
    _pretrained(scratch_root, tokenizer, "tiny")
    config = {"profile": "smoke", "finetune": {"superglue": {**SETTINGS, "epochs": 1}}}
    result = TASK_RUNNERS.get("pair")()(config, "tiny", "superglue", "multirc", 0, tokenizer)
    assert set(result["metrics"]) == {"f1a", "group_em"} and result["primary_metric"] == "f1a"
    # EM is per question: with every question alike, it is 0 or 1
    assert result["metrics"]["group_em"] in (0.0, 1.0)
    assert result["test_metrics"]["group_em"] in (0.0, 1.0)


def test_collate_choices_pads_to_batch_choice_length():
    from leanlm.runners.multiple_choice import collate_choices

    batch = collate_choices([[([2, 5, 3], [0, 0, 0]), ([2, 6, 7, 3], [0, 0, 1, 1])],
                             [([2, 3], [0, 0]), ([2, 8, 3], [0, 1, 1])]], pad_id=0)
    assert batch["input_ids"].shape == (2, 2, 4)
    assert batch["input_ids"][1, 0].tolist() == [2, 3, 0, 0]
    assert batch["attention_mask"][0, 1].tolist() == [1, 1, 1, 1]
    assert batch["token_type_ids"][1, 1].tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="same number of choices"):
        collate_choices([[([2], [0])], [([2], [0]), ([3], [0])]], pad_id=0)
