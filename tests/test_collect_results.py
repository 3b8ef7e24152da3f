"""scripts/collect_results.py: a finished run's claims report, figures and table CSVs copied into
docs/results/<name>/ with RUN.json saying how they were made (the signal CPU run's report is made so)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("collect_results", ROOT / "scripts" / "collect_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_copies_the_report_and_records_the_run(tmp_path):
    source, dest = tmp_path / "run", tmp_path / "docs" / "results" / "x"
    tables = source / "paper_tables" / "signal"
    tables.mkdir(parents=True)
    for name in ("claims.md", "claims.csv", "claims.tex", "figure_4_1.png", "table_3_2.csv", "table_3_2.tex",
                 "tables.pdf"):
        (tables / name).write_text(name)
    (source / "benchmarks" / "signal").mkdir(parents=True)
    (source / "benchmarks" / "signal" / "summary.md").write_text("# Benchmarks")
    load = tmp_path / "load.log"
    load.write_text("14:11 2.0 1.0 0.5\n14:12 4.0 2.0 1.0\n")
    code = _script().main(["--profile", "signal", "--source", str(source), "--dest", str(dest), "--command", "snakemake x",
                           "--commit", "abc1234", "--wall-seconds", "3600", "--load-log", str(load),
                           "--note", "first note", "--note", "second note"])
    assert code == 0
    run = json.loads((dest / "RUN.json").read_text())
    assert run["commit"] == "abc1234" and run["wall_seconds"] == 3600 and run["command"] == "snakemake x"
    assert run["notes"] == ["first note", "second note"]
    assert run["load_while_running"] == {"samples": 2, "mean_1min": 3.0, "max_1min": 4.0}
    assert sorted(run["files"]) == sorted(p.name for p in dest.iterdir() if p.name != "RUN.json")
    assert "tables.pdf" in run["files"]  # every table and figure in one file, as the README links it
    assert "table_3_2.tex" not in run["files"] and (dest / "benchmarks_summary.md").read_text() == "# Benchmarks"


def test_a_run_without_a_claims_report_is_refused(tmp_path, capsys):
    (tmp_path / "paper_tables" / "signal").mkdir(parents=True)
    code = _script().main(["--profile", "signal", "--source", str(tmp_path), "--dest", str(tmp_path / "out"),
                           "--command", "c", "--commit", "c", "--wall-seconds", "1"])
    assert code == 2 and "has no claims report" in capsys.readouterr().err and not (tmp_path / "out").exists()
