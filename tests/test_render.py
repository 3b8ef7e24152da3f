"""Aggregation, the rendering machinery (grid template, write_table, tables.yaml) and formatting.

The chapter-3 tables themselves are tested in test_render_ch3.py on a synthetic tidy table.
"""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ch3_synthetic import BASE, PARAMS
from leanlm.config import load_config
from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.io import write_json
from leanlm.reporting import aggregate
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row, header_groups
from leanlm.reporting.latex import Cell, tex_cell, tex_escape
from leanlm.reporting.render import (
    PARAMS_TABLES,
    TABLES,
    Table,
    best_flags,
    fmt_count,
    fmt_mean_std,
    render_table,
    write_table,
)
from leanlm.runs import runs

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = "ch3_encoder"


@pytest.fixture(scope="module")
def config():
    return load_config(REPO / "params" / "smoke.yaml")  # read with the real root, before switching


@pytest.fixture
def root(scratch_root):
    return scratch_root


def write_results(root: Path, config: dict, skip=lambda run, task, seed: False) -> None:
    """GLUE results JSONs of the encoder runs: every task's primary metric = BASE[attention] + 0.01 * seed."""
    for run in runs(config):
        if run.experiment != EXPERIMENT:
            continue
        results = []
        for task in config["finetune"]["glue"]["tasks"]:
            spec = get_task(task)
            for seed in config["seeds"]:
                if skip(run.name, task, seed):
                    continue
                value = BASE[run.attention] + 0.01 * seed
                metrics = {m: (value if m == spec.primary_metric else 0.123) for m in spec.metrics}
                results.append({"task": task, "seed": seed, "metrics": metrics, "primary_metric": spec.primary_metric,
                                "primary": value, "best_step": 10, "train_seconds": 1.0})
        write_json(root / "results" / "smoke" / "runs" / run.run_id / "glue.json", {
            "profile": "smoke", "experiment": run.experiment, "run": run.name, "run_id": run.run_id,
            "family": "glue", "model": dict(run.model), "results": results, "timing": {"seconds": 9.0},
            "parameters": {"total": 100_000 + PARAMS[run.attention], "attention": PARAMS[run.attention],
                           "embedding": 70_000},
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
    n_runs = sum(r.experiment == EXPERIMENT for r in runs(config))
    # n runs x 8 tasks x 2 seeds primary rows, plus QQP's accuracy and STS's Pearson as secondary rows
    assert int(df["is_primary"].sum()) == n_runs * 8 * 2
    assert len(df) == n_runs * (8 + 2) * 2
    row = df[(df.run_id == "ch3_encoder-mhe_mul") & (df.task == "stsb") & (df.seed == 1) & (df.metric == "spearman")]
    assert row["value"].item() == pytest.approx(BASE["mhe_mul"] + 0.01) and row["is_primary"].item()
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


# --------------------------------------------------------------------------- rendering machinery
def test_render_needs_the_aggregate_and_a_known_table(root, config):
    with pytest.raises(LeanLMError, match="experiments/ch3_encoder.csv does not exist"):
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


# --------------------------------------------------------------------------- grid template
def test_header_groups_span_consecutive_columns():
    columns = [Column("#params"), Column("Acc", "GLUE"), Column("PRR", "GLUE"), Column("F1", "SQUAD")]
    assert header_groups(columns) == [
        {"title": "", "span": 1, "first": 2, "last": 2},
        {"title": "GLUE", "span": 2, "first": 3, "last": 4},
        {"title": "SQUAD", "span": 1, "first": 5, "last": 5},
    ]


def test_notes_mark_each_text_once():
    notes = Notes()
    assert notes.mark("x") == "a" and notes.mark("y") == "b" and notes.mark("x") == "a"
    assert notes.marked(Cell("1", bold=True), "y") == Cell("1", True, "b")
    assert notes.marked("2", None) == Cell("2")
    assert notes.context() == [{"mark": "a", "text": "x"}, {"mark": "b", "text": "y"}]


def test_grid_table_renders_groups_thesis_rows_notes_and_landscape(root):
    notes = Notes()
    columns = [Column("#params", arrow="↓"), Column("Acc", "GLUE", "↑"), Column("PRR", "GLUE", "↑")]
    rows = [grid_row("SHA", [Cell("8.85M", bold=True), "70.0 (0.7)", "87.5"], reported=["8.85M", "79.2", "96.7"]),
            grid_row(notes.marked(Cell("FNET"), "footnote 5"), ["0", "60.0", "75.0"], rule_before=True)]
    context = grid_context(caption="A 50% caption_", columns=columns, rows=rows, notes=notes, landscape=True)
    assert context["template"] == "grid_table.tex.j2"
    tex_path, csv_path = write_table("smoke", "table_x", Table(frame=pd.DataFrame({"a": [1]}), context=context))
    lines = tex_path.read_text().splitlines()
    assert lines[0] == r"\begin{landscape}" and lines[-1] == r"\end{landscape}"
    assert r"\caption{A 50\% caption\_}" in lines
    assert r" &  & \multicolumn{2}{c}{GLUE} \\" in lines
    assert r"\cmidrule(lr){3-4}" in lines
    assert r"Attention & \#params$\downarrow$ & Acc$\uparrow$ & PRR$\uparrow$ \\" in lines
    sha = lines.index(r"SHA & \textbf{8.85M} & 70.0 (0.7) & 87.5 \\")
    assert lines[sha + 1] == r"\quad\textit{thesis} & \textit{8.85M} & \textit{79.2} & \textit{96.7} \\"
    assert lines[sha + 2] == r"\midrule" and lines[sha + 3] == r"FNET$^{\mathrm{a}}$ & 0 & 60.0 & 75.0 \\"
    assert r"$^{\mathrm{a}}$\,footnote 5\par" in lines
    assert pd.read_csv(csv_path)["a"].tolist() == [1]
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        grid_context(caption="", columns=columns, rows=[grid_row("X", ["1", "2"])])


def test_write_table_defaults_to_the_tables_own_template(root):
    (root / "workflow" / "templates" / "table_y.tex.j2").write_text(r"own \VAR{name} \VAR{x}" + "\n")
    tex_path, _ = write_table("smoke", "table_y", Table(frame=pd.DataFrame(), context={"x": 3}))
    assert tex_path.read_text() == "own table_y 3\n"


def test_tables_yaml_names_every_renderer_and_its_template(config):
    """Snakemake's view (params/tables.yaml) and the package's registries agree on every table."""
    from leanlm.reporting.analytic import ANALYTIC

    spec = yaml.safe_load((REPO / "params" / "tables.yaml").read_text())
    kinds = {name: s["kind"] for name, s in spec.items()}
    assert {n for n, k in kinds.items() if k == "results"} == set(TABLES.names())
    assert {n for n, k in kinds.items() if k == "params"} == set(PARAMS_TABLES.names())
    assert {n for n, k in kinds.items() if k == "analytic"} == set(ANALYTIC.names())
    for name, s in spec.items():
        template = s.get("template", f"{name}.tex.j2")
        if "tex" in s["outputs"]:
            assert (REPO / "workflow" / "templates" / template).is_file(), name
        for experiment in s.get("experiments", []) + s.get("optional", []):
            assert experiment in config["_matrix"], (name, experiment)
        for path in s.get("inputs", []):
            assert (REPO / path).is_file(), (name, path)
