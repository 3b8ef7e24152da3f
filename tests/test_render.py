"""Aggregation and Table 3.1 rendering from synthetic per-run results in a scratch project root."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from leanlm.config import load_config, runs
from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.io import write_json
from leanlm.reporting import aggregate
from leanlm.reporting.latex import Cell, tex_cell, tex_escape
from leanlm.reporting.render import best_flags, fmt_count, fmt_mean_std, render_table

REPO = Path(__file__).resolve().parents[1]
PARAMS_SHA = 2 * (3 * 64 * 16 + 64 * 64)        # 2 layers of SHA at d=64, 4 heads of 16: 14,336
PARAMS = {"sha": PARAMS_SHA, "mha": 2 * 4 * 64 * 64, "mhe_add": PARAMS_SHA + 2 * 3 * 4 * 16,
          "mhe_mul": PARAMS_SHA + 2 * 3 * 4 * 16}
# Every task's primary metric = BASE[run] + 0.01 * seed, so with seeds 0 and 1 the GLUE average is
# 100 * BASE + 0.5 with std 0.71 (= 100 * 0.01 / sqrt(2)).
BASE = {"sha": 0.70, "mha": 0.80, "mhe_add": 0.74, "mhe_mul": 0.76}


@pytest.fixture(scope="module")
def config():
    return load_config(REPO / "params" / "smoke.yaml")  # read with the real root, before switching


@pytest.fixture
def root(scratch_root):
    return scratch_root


def write_results(root: Path, config: dict, skip=lambda run, task, seed: False) -> None:
    for run in runs(config):
        results = []
        for task in config["finetune"]["glue"]["tasks"]:
            spec = get_task(task)
            for seed in config["seeds"]:
                if skip(run.name, task, seed):
                    continue
                value = BASE[run.name] + 0.01 * seed
                metrics = {m: (value if m == spec.primary_metric else 0.123) for m in spec.metrics}
                results.append({"task": task, "seed": seed, "metrics": metrics, "primary_metric": spec.primary_metric,
                                "primary": value, "best_step": 10, "train_seconds": 1.0})
        write_json(root / "results" / "smoke" / "runs" / run.run_id / "glue.json", {
            "profile": "smoke", "experiment": run.experiment, "run": run.name, "run_id": run.run_id,
            "family": "glue", "model": dict(run.model), "results": results, "timing": {"seconds": 9.0},
            "parameters": {"total": 100_000 + PARAMS[run.name], "attention": PARAMS[run.name], "embedding": 70_000},
            "hardware": "cpu: test",
        })
        write_json(root / "results" / "smoke" / "runs" / run.run_id / "pretrain.json",
                   {"run_id": run.run_id, "summary": {"final_loss": 5.0}, "parameters": {}, "hardware": "cpu"})


# --------------------------------------------------------------------------- aggregation
def test_aggregate_writes_the_tidy_table(root, config):
    write_results(root, config)
    path = aggregate.main("smoke")
    df = pd.read_csv(path)
    assert list(df.columns) == aggregate.COLUMNS
    # 4 runs x 8 tasks x 2 seeds primary rows, plus QQP's accuracy and STS's Pearson as secondary rows
    assert int(df["is_primary"].sum()) == 4 * 8 * 2
    assert len(df) == 4 * (8 + 2) * 2
    row = df[(df.run_id == "ch3_encoder-mhe_mul") & (df.task == "stsb") & (df.seed == 1) & (df.metric == "spearman")]
    assert row["value"].item() == pytest.approx(0.77) and row["is_primary"].item()
    assert row["attention"].item() == "mhe_mul" and row["params_attention"].item() == PARAMS["mhe_mul"]
    assert not (root / "results" / "smoke" / "all_runs.csv.tmp").exists()


def test_malformed_results_name_the_file(root, config):
    write_results(root, config)
    bad = root / "results" / "smoke" / "runs" / "ch3_encoder-mha" / "glue.json"
    bad.write_text("{ not json")
    with pytest.raises(LeanLMError, match=r"ch3_encoder-mha/glue.json"):
        aggregate.aggregate("smoke")
    doc = {"profile": "smoke", "experiment": "ch3_encoder", "run": "mha"}
    bad.write_text(json.dumps(doc))
    with pytest.raises(LeanLMError, match=r"glue.json: results JSON has no key parameters"):
        aggregate.aggregate("smoke")


def test_aggregate_without_results_is_a_clear_error(root):
    with pytest.raises(LeanLMError, match="no fine-tuning results"):
        aggregate.aggregate("smoke")


# --------------------------------------------------------------------------- Table 3.1
def test_render_table_3_1(root, config):
    write_results(root, config)
    aggregate.main("smoke")
    tex_path, csv_path = render_table("smoke", "table_3_1", config)
    assert tex_path == root / "paper_tables" / "smoke" / "table_3_1.tex"
    tex = tex_path.read_text()
    body = {line.split(" & ")[0]: line.split(" & ") for line in tex.splitlines() if " & " in line and "\\\\" in line}
    # rows in thesis order, only the runs of the matrix
    order = [line.split(" & ")[0] for line in tex.splitlines() if line.split(" & ")[0] in {"SHA", "MHA", "MHE-ADD", "MHE-MUL"}]
    assert order == ["SHA", "MHA", "MHE-ADD", "MHE-MUL"]
    # reproduced: #params, GLUE mean (std), PRR, PEoP | thesis: #params, Acc, PRR, PEoP
    assert body["SHA"][1:5] == [r"\textbf{14.34K}", "70.5 (0.7)", "87.6", "-"]
    assert body["MHA"][1:5] == ["32.77K", r"\textbf{80.5 (0.7)}", "100.0", "0.11"]
    assert body["MHE-MUL"][1:5] == ["14.72K", "76.5 (0.7)", r"\textbf{95.0}", r"\textbf{3.18}"]
    assert body["MHE-ADD"][3:5] == ["92.5", "2.12"]
    assert body["SHA"][5:] == [r"\textbf{8.85M}", "79.2", "96.7", r"- \\"]
    assert body["MHA"][5:7] == [r"28.32M$^{\mathrm{a}}$", r"\textbf{81.9}"]
    assert body["MHE-MUL"][7:] == [r"\textbf{98.3}", r"\textbf{5.53} \\"]
    assert "28,311,552" in tex  # the footnote: printed 28.32M, counted 28,311,552
    assert "smoke profile: 2 layers, d=64 (4 heads of 16), packaged stand-in data; not comparable" in tex
    assert r"\toprule" in tex and r"\bottomrule" in tex

    csv = pd.read_csv(csv_path).set_index("attention")
    assert list(csv.index) == ["SHA", "MHA", "MHE-ADD", "MHE-MUL"]
    assert csv.loc["MHE-MUL", "glue_mean"] == pytest.approx(76.5)
    assert csv.loc["MHE-MUL", "glue_std"] == pytest.approx(1 / math.sqrt(2))
    assert csv.loc["MHE-MUL", "glue_prr"] == pytest.approx(100 * 76.5 / 80.5)
    assert csv.loc["MHE-MUL", "glue_peop"] == pytest.approx((76.5 / 70.5 - 1) / (PARAMS["mhe_mul"] / PARAMS_SHA - 1))
    assert csv.loc["MHE-MUL", "reported_glue_peop"] == 5.53
    assert csv.loc["MHA", "reported_params"] == "28.32M"
    assert csv.loc["SHA", "params_attention"] == PARAMS_SHA and csv.loc["SHA", "n_seeds"] == 2


def test_render_table_3_5_per_task_with_thesis_rows(root, config):
    write_results(root, config)
    aggregate.main("smoke")
    tex_path, csv_path = render_table("smoke", "table_3_5", config)
    lines = tex_path.read_text().splitlines()
    header = next(line for line in lines if line.startswith("Attention"))
    assert header.split(" & ")[1:] == ["MNLI$\\uparrow$", "QNLI$\\uparrow$", "QQP$\\uparrow$", "RTE$\\uparrow$",
                                       "SST$\\uparrow$", "MRPC$\\uparrow$", "CoLA$\\uparrow$", "STS$\\uparrow$",
                                       "GLUE Avg.$\\uparrow$ \\\\"]
    mha = lines.index(next(line for line in lines if line.startswith("MHA &")))
    assert lines[mha].split(" & ")[5] == r"\textbf{80.5 (0.7)}"          # SST, reproduced
    thesis = lines[mha + 1].split(" & ")
    assert thesis[0] == r"\quad\textit{thesis}"
    assert thesis[5] == r"\textit{\textbf{92.0 (0.3)}}"                 # SST, printed: best of the four
    assert thesis[7] == r"\textit{\textbf{59.6 (1.3)}}"                 # CoLA
    csv = pd.read_csv(csv_path).set_index("attention")
    assert csv.loc["SHA", "cola_mean"] == pytest.approx(70.5)
    assert csv.loc["SHA", "reported_cola"] == 53.8 and csv.loc["SHA", "reported_glue_avg_std"] == 0.1


def test_missing_run_is_a_clear_error(root, config):
    write_results(root, config)
    shutil.rmtree(root / "results" / "smoke" / "runs" / "ch3_encoder-mhe_add")
    aggregate.main("smoke")
    with pytest.raises(LeanLMError, match=r"ch3_encoder-mhe_add on glue.*ch3_encoder-mhe_add/glue.json is missing"):
        render_table("smoke", "table_3_1", config)


def test_missing_task_seed_is_a_clear_error(root, config):
    write_results(root, config, skip=lambda run, task, seed: run == "sha" and task == "cola" and seed == 1)
    aggregate.main("smoke")
    with pytest.raises(LeanLMError, match=r"ch3_encoder-sha/glue.json lacks 1 task/seed.*cola seed 1"):
        render_table("smoke", "table_3_1", config)


def test_render_needs_the_aggregate_and_a_known_table(root, config):
    with pytest.raises(LeanLMError, match="all_runs.csv does not exist"):
        render_table("smoke", "table_3_1", config)
    with pytest.raises(LeanLMError, match="unknown table 'table_9_9'"):
        render_table("smoke", "table_9_9", config)


# --------------------------------------------------------------------------- formatting
def test_formatting_helpers():
    assert fmt_count(28_311_552) == "28.31M" and fmt_count(14_336) == "14.34K" and fmt_count(512) == "512"
    assert fmt_mean_std(81.94, 0.25) == "81.9 (0.2)" and fmt_mean_std(81.94, float("nan")) == "81.9"
    assert best_flags([1.0, 3.0, 3.0, float("nan")], True, 1) == [False, True, True, False]
    assert best_flags([1.0, 3.0, 2.0], True, 1, exclude=[1]) == [False, False, True]
    assert best_flags([5.0, 5.0], False, 1) == [False, False]  # all equal: nothing stands out
    assert best_flags([5.0, 4.0], False, 0) == [False, True]


def test_latex_escaping():
    assert tex_escape("50% of a_b & #1 {x} ~ ^") == r"50\% of a\_b \& \#1 \{x\} \textasciitilde{} \textasciicircum{}"
    assert tex_escape("Acc↑") == r"Acc$\uparrow$"
    assert tex_cell(Cell("MHE_MUL", bold=True, mark="a")) == r"\textbf{MHE\_MUL}$^{\mathrm{a}}$"
    assert tex_cell(Cell("$3d^2n$", raw=True)) == "$3d^2n$"
