"""scripts/compare_tables.py: the before/after check of issue 15's move (same tables from the same runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_tables.py"


@pytest.fixture
def compare():
    spec = importlib.util.spec_from_file_location("compare_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _roots(tmp_path, second: dict[str, str], first: dict[str, str] | None = None):
    first = first or {"table_2_3.csv": "run,score,seconds_per_sample\nmlm,0.5,0.012\n",
                      "table_3_1.csv": "run,avg\nmha,61.2\n"}
    roots = []
    for name, files in (("a", first), ("b", second)):
        folder = tmp_path / name / "paper_tables" / "smoke"
        folder.mkdir(parents=True)
        for file, text in files.items():
            (folder / file).write_text(text)
        roots.append(str(tmp_path / name))
    return roots


def test_identical_tables_pass(tmp_path, compare, capsys):
    a, b = _roots(tmp_path, {"table_2_3.csv": "run,score,seconds_per_sample\nmlm,0.5,0.012\n",
                             "table_3_1.csv": "run,avg\nmha,61.2\n"})
    assert compare([a, b]) == 0
    assert "identical: 2 of 2; same results" in capsys.readouterr().out


def test_a_changed_score_fails_naming_file_and_column(tmp_path, compare, capsys):
    a, b = _roots(tmp_path, {"table_2_3.csv": "run,score,seconds_per_sample\nmlm,0.5,0.012\n",
                             "table_3_1.csv": "run,avg\nmha,61.3\n"})
    assert compare([a, b]) == 1
    assert "table_3_1.csv: DIFFERENT: avg (max |diff| 0.1)" in capsys.readouterr().out


def test_a_measured_time_may_differ_when_ignored_and_only_then(tmp_path, compare, capsys):
    a, b = _roots(tmp_path, {"table_2_3.csv": "run,score,seconds_per_sample\nmlm,0.5,0.019\n",
                             "table_3_1.csv": "run,avg\nmha,61.2\n"})
    assert compare([a, b, "--ignore-column", "seconds_per_sample"]) == 0
    assert "table_2_3.csv: measured columns differ (ignored): seconds_per_sample" in capsys.readouterr().out
    assert compare([a, b]) == 1


def test_a_missing_table_fails(tmp_path, compare, capsys):
    a, b = _roots(tmp_path, {"table_2_3.csv": "run,score,seconds_per_sample\nmlm,0.5,0.012\n"})
    assert compare([a, b]) == 1
    assert "only in the first: table_3_1.csv" in capsys.readouterr().out
