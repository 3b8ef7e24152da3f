"""The GPU check's loss-curve figure, drawn from the committed H200 record (docs/gpu-check.md)."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from leanlm.benchmarks.gpucheck import figures

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs/results/gpu/2026-11-28-h200/call-1/gpu_check.json"


def _documented_command() -> list[str]:
    """The command as docs/gpu-check.md gives it (one line starting with `python -m ...figures`)."""
    lines = [line.strip() for line in (ROOT / "docs/gpu-check.md").read_text().splitlines()
             if line.strip().startswith("python -m leanlm.benchmarks.gpucheck.figures")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_documented_command_draws_both_twins(tmp_path):
    argv = _documented_command()
    assert argv[3] == str(RECORD.relative_to(ROOT))
    stem = tmp_path / "twin_curves"
    env_path = str(ROOT / "workflow")
    done = subprocess.run([sys.executable, *argv[1:3], argv[3], str(stem)], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr
    for suffix in (".png", ".pdf"):
        assert (stem.with_suffix(suffix)).stat().st_size > 10_000
    # The committed figure is the one this record draws (it exists where the docs point).
    assert (ROOT / argv[4]).with_suffix(".png").is_file()


def test_curves_come_from_the_record_and_a_missing_twin_is_named():
    record = json.loads(RECORD.read_text())
    curves = figures.twin_curves(record)
    assert set(curves) == {"bert", "qwen"}
    assert curves["bert"]["losses"] == record["sections"]["correctness"]["steps"]["twin/bert"]["losses"]
    broken = copy.deepcopy(record)
    for step in broken["sections"]["correctness"]["steps"].values():
        step["status"] = "skipped"
    with pytest.raises(ValueError, match="no twin ran.*skipped"):
        figures.twin_curves(broken)
    broken["sections"]["correctness"]["steps"]["twin/qwen"]["status"] = "ok"
    assert set(figures.twin_curves(broken)) == {"qwen"}


def test_relative_differences():
    assert figures.relative_differences([1.0, 2.2], [1.0, 2.0]) == pytest.approx([0.0, 0.1])
    with pytest.raises(ValueError, match="2 steps against 1"):
        figures.relative_differences([1.0, 2.0], [1.0])


def test_a_file_that_is_not_a_record_gets_a_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"sections": {"correctness": {"steps": {"twin/bert": {"status": "ok"}}}}}))
    assert figures.main([str(bad), str(tmp_path / "out")]) == 2
