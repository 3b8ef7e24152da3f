"""``leanlm share pull`` uses nothing tampered and replaces nothing mid-run (issue 24, cases 4 and 12).

- 4: an object changed in the DVC remote was checked out with exit 0, and ``snakemake -n`` then had nothing
  to do (``dvc status`` too reports nothing after such a pull). Now the pull verifies every file it
  downloads (DVC's own ``verify``) and stops naming the files whose copy differs, checking out none of them.
- 12: a pull while a Snakemake run of the profile holds its lock replaced outputs and records mid-run; now
  it is refused, before the pull and again before the records are restored.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leanlm.errors import DataError


# ----------------------------------------------------- 12. share pull while a Snakemake run is writing
def _snakemake_lock(root: Path, lock_type: str, keys: list[str]) -> Path:
    """A lock as a running Snakemake writes it (its own FilePersistence._write_locks)."""
    from types import SimpleNamespace

    from snakemake.persistence.file import FilePersistence

    lockdir = root / ".snakemake" / "locks"
    lockdir.mkdir(parents=True, exist_ok=True)
    held = SimpleNamespace(_lockdir=str(lockdir), _lockfile={})
    FilePersistence._write_locks(held, lock_type, keys)
    return Path(held._lockfile[lock_type])


@pytest.mark.parametrize("lock_type", ["output", "input"])
def test_share_pull_refuses_while_a_snakemake_run_holds_the_profile(tmp_path, monkeypatch, lock_type):
    from leanlm import share

    for top in ("models", "results"):
        (tmp_path / top / "smoke.dvc").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / top / "smoke.dvc").write_text("outs: []\n")
    lock = _snakemake_lock(tmp_path, lock_type, ["data/smoke/corpus", "models/smoke/ch3_encoder-mha/model.safetensors"])
    ran = []
    monkeypatch.setattr(share, "verified_pull", lambda *args: ran.append(args))
    with pytest.raises(DataError, match=rf"Snakemake run of profile 'smoke' holds its lock .*{lock.name} \(2 path\(s\) "
                                        r"of the profile, e.g. data/smoke/corpus\).*snakemake --unlock"):
        share.pull(tmp_path, "smoke")
    assert ran == []  # refused before dvc touched anything
    lock.unlink()
    _snakemake_lock(tmp_path, lock_type, ["models/paper/run/model.safetensors"])  # another profile's run
    share.check_no_run(tmp_path, "smoke")


def test_share_pull_sees_a_run_that_started_during_the_pull(tmp_path, monkeypatch):
    from leanlm import share

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "smoke.dvc").write_text("outs: []\n")
    monkeypatch.setattr(share, "_data_stages", lambda root, profile: [])
    monkeypatch.setattr(share, "verified_pull",
                        lambda root, targets, remote: _snakemake_lock(root, "output", ["results/smoke/all_runs.csv"]))
    monkeypatch.setattr(share, "restore_records", lambda root, profile: pytest.fail("records restored mid-run"))
    with pytest.raises(DataError, match="holds its lock"):
        share.pull(tmp_path, "smoke")


# ------------------------------------------------------------------------ 4. a tampered DVC remote
def _run(cwd: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@leanlm.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@leanlm.invalid"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def shared(tmp_path):
    """A project whose models/smoke was `dvc add`-ed and pushed to a real (local-directory) DVC remote,
    then cloned: the clone has the .dvc file and nothing else."""
    built, remote, clone = tmp_path / "built", tmp_path / "remote", tmp_path / "clone"
    built.mkdir()
    _run(built, "git", "init", "-q")
    _run(built, "dvc", "init", "-q")
    run = built / "models" / "smoke" / "run"
    run.mkdir(parents=True)
    (run / "model.safetensors").write_bytes(b"the trained weights")
    (run / "config.json").write_text('{"d_model": 8}')
    _run(built, "dvc", "remote", "add", "-q", "-d", "shared", str(remote))
    _run(built, "dvc", "add", "-q", "models/smoke")
    _run(built, "dvc", "push", "-q")
    _run(built, "git", "add", "-A")
    _run(built, "git", "commit", "-qm", "shared")
    _run(tmp_path, "git", "clone", "-q", str(built), str(clone))
    return clone, remote


def _remote_object(remote: Path, content: bytes) -> Path:
    return next(path for path in remote.rglob("*") if path.is_file() and path.read_bytes() == content)


def test_an_untouched_remote_is_pulled(shared):
    from leanlm import share

    clone, _ = shared
    share.verified_pull(clone, ["models/smoke.dvc"])
    assert (clone / "models/smoke/run/model.safetensors").read_bytes() == b"the trained weights"


def test_a_file_changed_in_the_remote_is_refused_by_name(shared):
    from leanlm import share

    clone, remote = shared
    _remote_object(remote, b"the trained weights").write_bytes(b"other weights!!")  # valid, same size or not
    with pytest.raises(DataError, match=r"differ from what git records.*: models/smoke/run/model\.safetensors\. "
                                        r"Someone changed or removed them in the remote"):
        share.verified_pull(clone, ["models/smoke.dvc"])
    assert not (clone / "models/smoke/run/model.safetensors").exists()


def test_dvc_alone_checks_out_the_tampered_file(shared):
    """Why the verified pull: a plain `dvc pull` of the same remote exits 0 with the changed bytes."""
    clone, remote = shared
    _remote_object(remote, b"the trained weights").write_bytes(b"other weights!!")
    _run(clone, "dvc", "pull", "-q", "models/smoke.dvc")
    assert (clone / "models/smoke/run/model.safetensors").read_bytes() == b"other weights!!"
    assert _run(clone, "dvc", "status", "--json", "models/smoke.dvc").strip() == "{}"
