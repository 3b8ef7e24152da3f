"""leanlm.io: atomic writes leave nothing half-written; build_once builds a shared cache once even
when several processes want it at the same moment."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from leanlm.io import atomic_path, read_jsonl, write_json, write_jsonl
from leanlm.scratch import build_once


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text().strip().startswith("{") and "half" not in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    write_jsonl(tmp_path / "rows.jsonl", [{"x": 1}, {"x": 2}])
    assert read_jsonl(tmp_path / "rows.jsonl") == [{"x": 1}, {"x": 2}]


def _build_slowly(target: str, log: str) -> None:
    """One competing process: build the target (slowly, so the others must wait) via build_once."""
    def build():
        with open(log, "a") as handle:
            handle.write("built\n")
        time.sleep(0.5)
        with atomic_path(target) as tmp:
            tmp.write_text("stream")

    build_once(target, build, "a token stream")


def test_concurrent_processes_build_once(tmp_path):
    target, log = tmp_path / "cache" / "stream.bin", tmp_path / "builds.log"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_build_slowly, args=(str(target), str(log))) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert log.read_text() == "built\n"          # one build, the other two waited and reused it
    assert target.read_text() == "stream"
    assert build_once(target, lambda: pytest.fail("rebuilt an existing target")) is False


def test_a_failed_build_releases_the_lock_and_the_next_call_builds(tmp_path):
    target = tmp_path / "stream.bin"

    def broken():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_once(target, broken)
    assert not target.exists()
    assert build_once(target, lambda: Path(target).write_text("ok")) is True
    assert target.read_text() == "ok"


def test_a_build_that_makes_nothing_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="did not create it"):
        build_once(tmp_path / "never.bin", lambda: None)
