"""The committed dvc.lock and .dvcignore against DVC itself (its own Repo API, no data needed):

- every stage dvc.lock records was run with the settings the params files hold now, so a fresh clone's
  `dvc status` / `dvc repro` does not call prepared data stale (a lock left at vocab 4096 after the smoke
  profile moved to 2048 did);
- every stage DVC defines in a clone has a lock entry, so a bare `dvc pull` has no stage to fail on: DVC
  defines the stages of the profiles dvc_stages.yaml lists (the smoke profile's; the paper profile's need
  the hub, and `leanlm data register`, run by `leanlm share push`, enters them where they are shared), and registering a profile makes
  DVC define its stages;
- Snakemake's `.snakemake_timestamp` marker, which it writes into every directory output, is DVC-ignored,
  so it never makes `dvc status` report a data stage modified.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

dvc_repo = pytest.importorskip("dvc.repo")
from dvc.dependency.param import ParamsDependency  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOCKED_PROFILES = ["smoke"]  # profiles whose data stages the committed lock must record


@pytest.fixture(scope="module")
def stages():
    with dvc_repo.Repo(str(ROOT)) as repo:
        yield list(repo.index.stages)


def _params(stage):
    return [dep for dep in stage.deps if isinstance(dep, ParamsDependency)]


def test_lock_records_every_stage_of_the_locked_profiles(stages):
    for profile in LOCKED_PROFILES:
        named = [s for s in stages if s.addressing.endswith(f"@{profile}")]
        assert named, profile
        unlocked = [s.addressing for s in named for dep in _params(s) if not dep.hash_info]
        assert not unlocked, f"dvc.lock lacks {unlocked}: run `dvc repro` on them and commit dvc.lock"


def test_every_stage_dvc_defines_is_locked(stages):
    """What makes a bare `dvc pull` fail ("Checkout failed" for a stage without a lock entry) is absent."""
    unlocked = [s.addressing for s in stages for out in s.outs if not out.hash_info]
    assert not unlocked, f"DVC defines {unlocked} but dvc.lock has no entry for them: drop the profile from " \
                         f"dvc_stages.yaml or run `dvc repro` on them and commit dvc.lock"


def test_registering_a_profile_makes_dvc_define_its_stages(tmp_path):
    from leanlm.config import load_config
    from leanlm.data.plumbing.dvc_profiles import register, staged_profiles

    for name in ("dvc.yaml", "dvc_stages.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    dvc_repo.Repo.init(str(tmp_path), no_scm=True)
    defined = lambda: sorted(s.name for s in dvc_repo.Repo(str(tmp_path)).index.stages)  # noqa: E731
    # What this checkout stages: the committed list, plus any profile run here since (a local rehearsal
    # registers itself); the test adds the paper profile to it.
    before = staged_profiles(tmp_path / "dvc.yaml")
    assert set(LOCKED_PROFILES) <= set(before["staged"]) and "paper" not in before["staged"]
    assert defined() == sorted([f"{stage}@{profile}" for profile in before["staged"]
                                for stage in ("fetch", "corpus", "tokenizer", "tasks")]
                               + [f"{stage}@{profile}" for profile in before["staged_named"]
                                  for stage in ("corpora", "tokenizers")])
    paper = load_config(str(ROOT / "params" / "paper.yaml"))
    assert register(paper, tmp_path / "dvc.yaml") and not register(paper, tmp_path / "dvc.yaml")  # once
    assert staged_profiles(tmp_path / "dvc.yaml") == {"staged": [*before["staged"], "paper"],
                                                      "staged_named": [*before["staged_named"], "paper"]}
    assert {"fetch@paper", "tasks@paper", "corpora@paper", "tokenizers@paper"} <= set(defined())
    assert not register(load_config(str(ROOT / "params" / "smoke.yaml")), tmp_path / "dvc.yaml")


def test_locked_params_match_the_params_files(stages):
    stale = {s.addressing: dep.workspace_status() for s in stages for dep in _params(s)
             if dep.hash_info and dep.workspace_status()}
    assert not stale, f"dvc.lock records other settings than the params files: {stale}; rerun `dvc repro` " \
                      f"on those stages and commit dvc.lock"


def test_snakemake_timestamp_is_dvc_ignored():
    with dvc_repo.Repo(str(ROOT)) as repo:
        ignored = repo.dvcignore.is_ignored_file
        fs = repo.fs
        for folder in ("data/smoke/tasks", "data/paper/corpora/slimpajama"):
            assert ignored(fs.join(str(ROOT), folder, ".snakemake_timestamp")), folder
        assert not ignored(fs.join(str(ROOT), "data/smoke/tasks", "MANIFEST.json"))
