"""The BERT-Hash model card's experiment (ch2_bert_hash_card) and table: in every profile, at the card's
sizes in the paper profile (its parameter counts are the card's), and rendered beside the card's numbers
(params/reported/ch2_bert_hash_card.csv) from synthetic results whose scores are checked by hand."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from leanlm.config import load_config
from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import total_parameters
from leanlm.modeling.embeddings import build_word_embedding
from leanlm.modeling.encoder import BertEncoder
from leanlm.modeling.projection_embeddings import BERT_HASH_SIZES
from leanlm.reporting.aggregate import COLUMNS, load
from leanlm.reporting.ch2.card import mismatched_split
from leanlm.reporting.ch2.results import finetune_variant, glue_settings
from leanlm.reporting.render import TABLES, write_table
from leanlm.reporting.reported import load_reported, parse_count
from leanlm.runs import finetune_seeds, finetune_settings, pretrain_settings, runs

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = TABLE = "ch2_bert_hash_card"
PROFILES = ("smoke", "signal", "paper", "rehearsal")
CARD_TASKS = ["mnli", "mrpc", "sst2"]
RUN_NAMES = ["bert_tiny", "bert_hash_femto", "bert_hash_pico", "bert_hash_nano"]
BERT_VOCAB = 30_522  # the card's (BERT's WordPiece), the paper profile's tokenizer


@pytest.fixture(scope="module")
def profiles():
    return {name: load_config(REPO / "params" / f"{name}.yaml") for name in PROFILES}


def card_runs(config):
    return [r for r in runs(config) if r.experiment == EXPERIMENT]


@pytest.mark.parametrize("profile", PROFILES)
def test_the_experiment_runs_in_every_profile_on_the_cards_three_tasks(profiles, profile):
    config = profiles[profile]
    assert EXPERIMENT in config["experiments"]
    selected = card_runs(config)
    assert [r.name for r in selected] == RUN_NAMES
    for run in selected:
        assert run.objective == "mlm" and run.finetune == ("glue",) and run.tokenizer == "profile"
        assert finetune_settings(config, run, "glue")["tasks"] == CARD_TASKS
        assert pretrain_settings(config, run)["steps"] > 0 and finetune_seeds(config, run, "glue")
        assert (run.model["n_layers"], run.model["n_heads"]) == (2, 2)  # bert-tiny's depth and heads, scaled widths
    # The ch. 2 experiments' own GLUE block keeps its eight tasks.
    assert len(config["finetune"]["glue"]["tasks"]) == 8


def test_chapter_2s_own_tables_keep_table_2_5s_variant(profiles):
    # The card's experiment first in the matrix: Tables 2.1-2.6 still read glue_ch2, not the card's settings.
    config = copy.deepcopy(profiles["paper"])
    config["_matrix"] = {EXPERIMENT: config["_matrix"][EXPERIMENT],
                         **{k: v for k, v in config["_matrix"].items() if k != EXPERIMENT}}
    assert finetune_variant(config) == "glue_ch2" and glue_settings(config)["epochs"] == 5


def test_paper_fine_tunes_with_the_cards_run_glue_settings(profiles):
    paper = profiles["paper"]
    run = card_runs(paper)[0]
    glue = finetune_settings(paper, run, "glue")
    assert (glue["lr"], glue["epochs"], glue["max_seq_len"], glue["batch_size"]) == (1e-4, 4, 128, 32)
    mlm = pretrain_settings(paper, run)
    assert (mlm["lr"], mlm["batch_size"], mlm["warmup_steps"], mlm["adam_eps"]) == (1e-3, 64, 2500, 1e-6)


def paper_model(run) -> ModelConfig:
    return ModelConfig.from_dict({**run.model, "vocab_size": BERT_VOCAB}, where=run.run_id)


def card_count(text: str, n: int) -> str:
    """``n`` as the card prints it: to as many decimals of millions as ``text`` has, cut (0.243M) or
    rounded (4.4M) as the card does."""
    decimals = len(text.rstrip("M").split(".")[1])
    cut = f"{math.floor(n / 10 ** (6 - decimals)) / 10 ** decimals:.{decimals}f}M"
    rounded = f"{n / 1e6:.{decimals}f}M"
    return cut if cut == text else rounded


def bert_model_parameters(vocab: int, d: int, ff: int, layers: int, positions: int, projections: int | None) -> int:
    """A BertModel's parameters by hand: token table (or BERT-Hash's vocab x p + p x d), positions, two token
    types, embedding LayerNorm; per layer Q, K, V, O with biases, two LayerNorms, the FFN; the pooler."""
    tokens = vocab * d if projections is None else vocab * projections + projections * d
    embeddings = tokens + positions * d + 2 * d + 2 * d
    layer = 4 * (d * d + d) + 2 * (2 * d) + (d * ff + ff) + (ff * d + d)
    return embeddings + layers * layer + (d * d + d)


def test_paper_sizes_are_the_cards_and_count_its_parameters(profiles):
    reported = load_reported(TABLE)
    for run in card_runs(profiles["paper"]):
        config = paper_model(run)
        size = run.name.removeprefix("bert_hash_")
        projections = (run.model.get("embedding_options") or {}).get("projections")
        if run.name != "bert_tiny":  # the sizes the modeling code knows (NeuML's configs)
            spec = BERT_HASH_SIZES[size]
            assert (config.d_model, config.d_ff, config.n_layers, config.n_heads, projections) == (
                spec["d_model"], spec["d_ff"], spec["n_layers"], spec["n_heads"], spec["projections"])
            with torch.device("meta"):  # the card's hash table: vocab x projections + projections x hidden
                emb = build_word_embedding(config).embedding_parameter_count()
            assert emb == BERT_VOCAB * projections + projections * config.d_model
        with torch.device("meta"):
            count = total_parameters(BertEncoder(config))  # what the card counts: model.bert.parameters()
        assert count == bert_model_parameters(BERT_VOCAB, config.d_model, config.d_ff, config.n_layers,
                                              config.max_position, projections)
        printed = reported.loc[run.name.replace("_", "-"), "params"]
        assert card_count(printed, count) == printed, (run.name, count, printed)
        assert abs(count - parse_count(printed)) / count < 0.01


def test_the_project_has_no_mnli_mismatched_dev_set():
    # Why the table prints '-' for ours: GLUE's validation_matched is MNLI's only dev split here.
    assert get_task("mnli").hub["validation"] == "validation_matched"
    assert mismatched_split() is None


# ----------------------------------------------------------------------------- the table, synthetic results
SEEDS = [0, 1]
VOCAB = 2048
ACC = {"bert_tiny": 0.70, "bert_hash_femto": 0.55, "bert_hash_pico": 0.60, "bert_hash_nano": 0.65}
# MRPC dev predictions per seed: F1 of seed 0 is 2/3 (TP 2, FP 1, FN 1), of seed 1 is 1.
REFERENCES = [1, 1, 1, 0, 0]
PREDICTIONS = {0: [1, 1, 0, 0, 1], 1: [1, 1, 1, 0, 0]}


@pytest.fixture
def card_config(profiles):
    config = copy.deepcopy(profiles["smoke"])
    config["finetune_variants"]["glue_bert_hash_card"]["seeds"] = SEEDS
    return config


def write_card_results(root: Path, config: dict, per_example: bool = True) -> None:
    rows = []
    for run in card_runs(config):
        model = ModelConfig.from_dict({**run.model, "vocab_size": VOCAB}).to_dict()
        results = []
        for index, task in enumerate(CARD_TASKS):
            for seed in SEEDS:
                value = ACC[run.name] + 0.01 * seed + 0.1 * index
                rows.append({"profile": "smoke", "experiment": EXPERIMENT, "run": run.name, "run_id": run.run_id,
                             "family": "glue", "backbone": "bert", "attention": "mha", "embedding": model["embedding"],
                             "layout": "uniform", "n_layers": 2, "n_decoder_layers": 0, "d_model": model["d_model"],
                             "n_heads": 2, "head_dim": model["head_dim"], "task": task, "seed": seed,
                             "metric": get_task(task).primary_metric, "value": value, "is_primary": True,
                             "params_total": 1, "params_attention": 1, "params_embedding": 1})
                kept = {"data": {"prediction": PREDICTIONS[seed], "reference": REFERENCES},
                        "statistics": {"accuracy": ["accuracy", {}]}}
                results.append({"task": task, "seed": seed, **({"per_example": kept} if per_example else {})})
        out = root / "results" / "smoke" / "runs" / run.run_id
        out.mkdir(parents=True, exist_ok=True)
        (out / "glue.json").write_text(json.dumps({"model": model, "results": results}))
    pd.DataFrame(rows, columns=COLUMNS).to_csv(root / "results" / "smoke" / "all_runs.csv", index=False)


def test_the_table_prints_ours_beside_the_cards_numbers(scratch_root, card_config):
    write_card_results(scratch_root, card_config)
    tex_path, csv_path = write_table("smoke", TABLE, TABLES.get(TABLE)("smoke", card_config, load("smoke")))
    tex, frame = tex_path.read_text(), pd.read_csv(csv_path)
    assert list(frame["model"]) == ["bert-tiny", "bert-hash-femto", "bert-hash-pico", "bert-hash-nano"]
    tiny = frame.iloc[0]
    # Ours: MNLI is task 0, MRPC 1, SST-2 2; seeds 0 and 1 add 0 and 0.01 (x100 printed).
    assert tiny["mnli_m_mean"] == pytest.approx(70.5) and tiny["mrpc_acc_mean"] == pytest.approx(80.5)
    assert tiny["sst2_mean"] == pytest.approx(90.5) and math.isnan(tiny["mnli_mm_mean"])
    assert tiny["mrpc_f1_mean"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert tiny["mrpc_f1_std"] == pytest.approx(100 * math.sqrt(2) * (1 - 2 / 3) / 2)
    # Parameters as the card counts them, at the profile's vocabulary.
    for _, row in frame.iterrows():
        run = next(r for r in card_runs(card_config) if r.run_id == row["run_id"])
        projections = (run.model.get("embedding_options") or {}).get("projections")
        assert row["params"] == bert_model_parameters(VOCAB, run.model["d_model"], run.model["d_ff"], 2,
                                                      run.model["max_position"], projections)
    # The card's numbers beside ours, as printed in the card (x100 in the .tex, fractions in the CSV).
    card = pd.read_csv(REPO / "params" / "reported" / f"{TABLE}.csv", comment="#")
    for column in ("params", "mnli_m", "mnli_mm", "mrpc_f1", "mrpc_acc", "sst2"):
        assert list(frame[f"reported_{column}"]) == list(card[column])
    assert r"\textit{card} & \textit{4.4M} & \textit{\textbf{71.14}} & \textit{\textbf{71.61}}" in tex
    assert r"\textit{0.969M} & \textit{65.65} & \textit{66.70} & \textit{81.72} & \textit{70.83} & \textit{81.31}" in tex
    # bert-tiny leads every column but F1 (equal for all) and parameters (femto's are fewest).
    assert r"\textbf{70.5 (0.7)} & - & 83.3 (23.6) & \textbf{80.5 (0.7)} & \textbf{90.5 (0.7)}" in tex
    assert r"bert-hash-femto & \textbf{0.039M} & 55.5 (0.7)" in tex
    assert "validation\\_matched" in tex and "MNLI mismatched is not measured" in tex


def test_missing_dev_predictions_are_a_clear_error(scratch_root, card_config):
    write_card_results(scratch_root, card_config, per_example=False)
    with pytest.raises(LeanLMError, match="keeps no mrpc dev predictions.*leanlm finetune --run ch2_bert_hash_card"):
        TABLES.get(TABLE)("smoke", card_config, load("smoke"))
    config = copy.deepcopy(card_config)
    config["_matrix"].pop(EXPERIMENT)
    with pytest.raises(LeanLMError, match="needs experiment 'ch2_bert_hash_card'"):
        TABLES.get(TABLE)("smoke", config, load("smoke"))
