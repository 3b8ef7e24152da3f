"""One job on its own (issue 25, item 5): running a single pretraining job leaves `git status` clean, and a job
builds only the data it reads.

- The data stages run as Snakemake's jobs write only into git-ignored folders: no `dvc repro` rewrites the
  committed `dvc.lock`, no `leanlm data register` the committed `dvc_stages.yaml` (sharing registers and
  locks a profile's data, `leanlm share push`).
- A pretraining job depends on the corpus and tokenizer (`data`), not on any task set; a fine-tuning job on
  its own family's task sets (`data_tasks_<family>`); the translation objective, which trains on a task's
  train split, on its family's.
- Planning reads no torch: the Snakefile is parsed and the DAG planned from params files and sources alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_wheels import pin_fake_wheels, write_fake_wheels
from test_pipeline import _job_counts, _tiny_profile

ROOT = Path(__file__).resolve().parents[1]
TRACKED = ("Snakefile", "dvc.yaml", "dvc.lock", "dvc_stages.yaml", ".dvcignore", ".gitignore")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git repository holding the project's tracked workflow files as committed (dvc.lock and
    dvc_stages.yaml included), with the tiny smoke profile of tests/test_pipeline.py."""
    root = tmp_path_factory.mktemp("one_job")
    for name in TRACKED:
        shutil.copy(ROOT / name, root / name)
    (root / ".dvc").mkdir()
    for name in ("config", ".gitignore"):
        shutil.copy(ROOT / ".dvc" / name, root / ".dvc" / name)
    shutil.copytree(ROOT / "params", root / "params")
    # snakemake_logger_plugin_leanlm: the terminal output profiles/default asks for (`logger: [leanlm]`)
    for sub in ("rules", "schemas", "templates", "profiles", "leanlm", "snakemake_logger_plugin_leanlm"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "profiles", root / "profiles")
    _tiny_profile(root / "params")
    write_fake_wheels(root / "cache" / "packages")
    git = ["git", "-c", "user.name=leanlm-test", "-c", "user.email=test@leanlm.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    (root / ".git" / "info" / "exclude").write_text("/cache/\n")  # the fake wheels: the test's, not the project's
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "the project"], cwd=root, check=True)
    env = {**os.environ, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"),
           "PYTHONPATH": str(root / "workflow"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "LEANLM_FORKSERVER": "off",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           **pin_fake_wheels(root / "cache" / "packages")}
    return root, env


def _snakemake(project, *args) -> str:
    root, env = project
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def _data_jobs(out: str) -> set[str]:
    return {rule for rule in _job_counts(out) if rule.startswith("data")}


def test_a_pretraining_job_plans_no_task_set(project):
    out = _snakemake(project, "-n", "models/smoke/ch3_encoder-mha/model.safetensors")
    assert _data_jobs(out) == {"data"} and "data/smoke/tasks" not in out, out[-3000:]


def test_a_finetuning_job_plans_its_familys_task_sets_only(project):
    out = _snakemake(project, "-n", "results/smoke/runs/ch3_encoder-mha/superglue.json")
    assert _data_jobs(out) == {"data", "data_tasks_superglue"}


def test_the_translation_objective_plans_the_task_sets_it_trains_on(project):
    out = _snakemake(project, "-n", "models/smoke/ch3_encdec-mha/model.safetensors")
    assert _data_jobs(out) == {"data", "data_tasks_translation"}


def test_the_whole_profile_plans_every_family_it_fine_tunes(project):
    families = {family for _, _, fams, _ in __import__("test_pipeline").TINY_MATRIX.values() for family in fams}
    assert _data_jobs(_snakemake(project, "-n")) == {"data", *(f"data_tasks_{f}" for f in families)}


@pytest.mark.slow
def test_one_pretraining_job_leaves_git_clean(project):
    root, _ = project
    out = _snakemake(project, "models/smoke/ch3_encoder-mha/model.safetensors")
    assert _job_counts(out) == {"data": 1, "pretrain": 1}, out[-3000:]
    assert (root / "models" / "smoke" / "ch3_encoder-mha" / "model.safetensors").is_file()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"the run changed files git tracks or sees:\n{status}"


@pytest.mark.slow
def test_task_set_jobs_build_their_own_familys_folders(project):
    """Two task-set jobs in one run (the rules are made in a loop: each job must run its own family)."""
    root, _ = project
    out = _snakemake(project, "data/smoke/tasks/copa", "data/smoke/tasks/sst2")
    assert _data_jobs(out) == {"data_tasks_glue", "data_tasks_superglue"}, out[-3000:]
    built = sorted(p.name for p in (root / "data" / "smoke" / "tasks").iterdir())
    assert built == sorted(["sst2", "stsb", "mrpc", "copa", "multirc"]), built
    for log, family in (("data_tasks_glue.log", "glue"), ("data_tasks_superglue.log", "superglue")):
        assert "data tasks (smoke, packaged)" in (root / "logs" / "smoke" / log).read_text(), family
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"the run changed files git tracks or sees:\n{status}"


def test_planning_imports_no_torch():
    """Parsing the Snakefile loads the profile (leanlm.config.load_config, with its cross-file checks) and
    imports the rule files' helpers; none of that may import torch (about 1 s of CPU per `snakemake` call).
    The one exception is the first check of a model config against its variants, which imports them and is
    remembered on disk (leanlm.memo): so a first process may import torch, a second must not."""
    code = ("import sys\n"
            "from leanlm.config import load_config\n"
            "from leanlm import cluster, forkserver, job_code, provenance, runs\n"
            "from leanlm.data import pretrain_data, tasks\n"
            "from leanlm.data.plumbing import dvc_profiles, stages\n"
            "from leanlm.reporting.tables_file import load_tables\n"
            "config = load_config('params/paper.yaml')\n"
            "for run in runs.runs(config):\n"
            "    job_code.pretrain_code(run)\n"
            "print('torch' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env=env)
    assert proc.stdout.strip() == "False", "planning imported torch"
