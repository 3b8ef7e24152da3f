"""Issue 26, item 1: a table's jobs are its own. Aggregation is per experiment
(results/<profile>/experiments/<experiment>.csv), so a table, a chapter or a model plans only its own runs;
all_runs.csv is the pieces put together, byte for byte what aggregating every run at once writes, and keeps
the results on disk of experiments a run leaves out. Dry runs of the real Snakefile and the Makefile's
targets (docs/running.md), read from Snakemake's job list."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leanlm.reporting import aggregate
from test_render import EXPERIMENT, config, root, write_results  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent


def planned(out: str) -> dict[str, list[str]]:
    """Rule -> the wildcards of each of its planned jobs, from a dry run's job blocks."""
    jobs: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        rule = re.match(r"\s*(?:local)?rule (\w+):", block)
        if rule:
            wildcards = re.search(r"wildcards: (.*)", block)
            jobs.setdefault(rule.group(1), []).append(wildcards.group(1) if wildcards else "")
    assert jobs, out[-3000:]
    return jobs


def runs_of(jobs: dict[str, list[str]], rule: str) -> set[str]:
    return {re.search(r"run_id=([\w.@-]+)", w).group(1) for w in jobs.get(rule, [])}


def dry_run(*args: str) -> str:
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_one_table_plans_only_its_chapters_runs():
    """The issue's command: Table 4.1 reads ch4_uniform (and the optional ch4_hybrid, ch4_skip) only."""
    jobs = planned(dry_run(str(VENV / "bin" / "snakemake"), "paper_tables/smoke/table_4_1.tex", "--forceall",
                           "-n", "--configfile", "params/smoke.yaml"))
    trained, tuned = runs_of(jobs, "pretrain"), runs_of(jobs, "finetune")
    assert trained and tuned
    assert {r.split("-", 1)[0] for r in trained | tuned} == {"ch4_uniform", "ch4_hybrid", "ch4_skip"}, trained | tuned
    assert sorted(w.split("experiment=")[1] for w in jobs["aggregate"]) == ["ch4_hybrid", "ch4_skip", "ch4_uniform"]
    assert not {"all_runs", "claims", "lm_eval_baselines"} & set(jobs), sorted(jobs)


def make_plan(*args: str) -> dict[str, list[str]]:
    assert shutil.which("make"), "make is missing"
    return planned(dry_run("make", "--no-print-directory", *args, f"VENV={VENV}", "SNAKEMAKE_ARGS=-n --forceall"))


def test_make_table_chapter_and_model_plan_only_their_jobs():
    jobs = make_plan("table", "T=figure_3_1")
    assert {r.split("-", 1)[0] for r in runs_of(jobs, "finetune")} <= {"ch3_encoder", "ch3_decoder", "ch3_encdec"}
    assert not any(r.startswith(("ch2_", "ch4_")) for r in runs_of(jobs, "pretrain"))
    jobs = make_plan("chapter", "C=2")
    assert runs_of(jobs, "pretrain") and all(r.startswith("ch2_") for r in runs_of(jobs, "pretrain") | runs_of(jobs, "finetune"))
    assert any("table=table_2_1" in w for w in jobs["render_table"])
    assert not {"all_runs", "claims", "pdf"} & set(jobs)
    jobs = make_plan("model", "RUN=ch3_encoder-mhe_mul")
    assert runs_of(jobs, "pretrain") == runs_of(jobs, "finetune") == {"ch3_encoder-mhe_mul"}
    assert len(jobs["finetune"]) == 3 and "aggregate" not in jobs


def test_a_part_not_in_the_profile_is_named():
    proc = subprocess.run(["make", "--no-print-directory", "table", "T=table_9_9", f"VENV={VENV}", "SNAKEMAKE_ARGS=-n"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")})
    assert proc.returncode != 0 and "table=table_9_9" in proc.stdout + proc.stderr and "table_4_1" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ the pieces and all_runs.csv
def _second_experiment(root: Path) -> None:
    """Copies of the ch3_encoder results as another experiment's (ch3_decoder), as its jobs would write them."""
    runs = root / "results" / "smoke" / "runs"
    for folder in sorted(runs.glob(f"{EXPERIMENT}-*")):
        name = folder.name.split("-", 1)[1]
        target = runs / f"ch3_decoder-{name}"
        target.mkdir()
        for path in folder.glob("*.json"):
            doc = json.loads(path.read_text())
            doc.update(experiment="ch3_decoder", run_id=target.name)
            (target / path.name).write_text(json.dumps(doc))


def test_pieces_put_together_are_the_whole_aggregation(root, config):
    write_results(root, config)
    _second_experiment(root)
    whole = aggregate.aggregate("smoke").to_csv(index=False)
    for experiment in (EXPERIMENT, "ch3_decoder"):
        aggregate.write_piece("smoke", experiment)
        piece = aggregate.load("smoke", [experiment])
        assert set(piece["experiment"]) == {experiment} and len(piece)
    out = aggregate.combine("smoke", experiments=[EXPERIMENT, "ch3_decoder"])
    assert out.read_text() == whole
    # a run of part of the matrix (one experiment's piece) keeps the other's results on disk in all_runs.csv
    aggregate.piece_path("smoke", "ch3_decoder").unlink()
    assert aggregate.combine("smoke", experiments=[EXPERIMENT]).read_text() == whole
    with pytest.raises(aggregate.LeanLMError, match=r"experiments/ch3_decoder.csv does not exist"):
        aggregate.load("smoke", ["ch3_decoder"])
    with pytest.raises(aggregate.LeanLMError, match=r"experiments/ch3_decoder.csv missing"):
        aggregate.combine("smoke", experiments=["ch3_decoder"])
