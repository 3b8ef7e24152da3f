"""The slurm profile on a real SLURM: Debian's slurm-wlm 22.05 with slurmdbd (so sacct has accounting) and
munge, started for this one machine by scripts/slurm_local.sh (installed with apt-get when missing) and
stopped at the end.

`snakemake --profile workflow/profiles/slurm` runs, untouched and without command-line resource
overrides, a tiny smoke DAG: one pretraining and one fine-tuning job as SLURM jobs, the aggregation and one
table as localrules. The pretraining job is killed with scancel once it has written a checkpoint (its job
step, so that the job ends FAILED; see below); the profile's retries submit it again and it resumes from
that checkpoint. sacct must show the failed and the completed jobs.

Why the step and not the whole job: a job cancelled as a whole ends in sacct state "CANCELLED by <uid>",
which snakemake-executor-plugin-slurm 2.8.0 compares with "CANCELLED" and so takes for a job still running:
Snakemake then waits for ever (seen here). A job that reaches its time limit (TIMEOUT) or fails is retried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fake_wheels import write_fake_wheels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
RUN = "ch3_encoder-mha"
TARGETS = ["results/smoke/all_runs.csv", "paper_tables/smoke/table_3_1.tex"]
STEPS, EVERY = 2000, 100

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node SLURM: the environment (SLURM_CONF) its clients need."""
    if os.geteuid() != 0:
        pytest.fail("the SLURM test starts slurmctld/slurmd/slurmdbd as root (and apt-get installs them)")
    state = Path("/tmp") / f"leanlm-slurm-{os.getpid()}"  # short: munge/slurm socket paths have a length limit
    try:
        out = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, f"slurm_local.sh start failed:\n{out.stderr[-3000:]}"
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def _profile(params: Path) -> None:
    """One BERT run (MHA), GLUE on one task, long enough (STEPS) to be cancelled after a checkpoint."""
    ch3 = params / "experiments" / "ch3.yaml"
    doc = yaml.safe_load(ch3.read_text())
    doc["ch3_encoder"] = {"chapter": 3, "title": "ch3_encoder", "backbone": "bert", "objective": "mlm",
                          "finetune": ["glue"], "runs": {"mha": {"attention": "mha"}}}
    ch3.write_text(yaml.safe_dump(doc, sort_keys=False))
    path = params / "smoke.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["experiments"] = ["ch3_encoder"]
    doc["seeds"] = [0]
    doc["data"]["tokenizer"]["vocab_size"] = 600
    doc["data"]["tasks"].update(max_train_examples=48, max_eval_examples=24)
    doc["models"]["bert"].update(n_layers=1, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_position=64)
    doc["pretrain"]["mlm"].update(steps=STEPS, batch_size=8, seq_len=32, warmup_steps=1, checkpoint_every=EVERY)
    doc["finetune"]["glue"].update(tasks=["sst2"], epochs=1, batch_size=16, max_seq_len=32)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def project(tmp_path_factory, slurm):
    # On the file system the SLURM jobs share with this process (the same machine here).
    root = tmp_path_factory.mktemp("slurm_project")
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", root / ".dvc" / "config")
    shutil.copytree(ROOT / "params", root / "params")
    for sub in ("rules", "schemas", "templates", "profiles", "leanlm"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub, ignore=shutil.ignore_patterns("__pycache__"))
    _profile(root / "params")
    write_fake_wheels(root / "cache" / "packages")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    env = {**slurm, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "workflow"), os.environ.get("PYTHONPATH")]))}
    # The data stages first, locally (they are localrules under the profile too).
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "data"], cwd=root, env=env, check=True,
                   capture_output=True, timeout=600)
    return root, env


def _sacct(env) -> dict[str, list[str]]:
    """Job name (Snakemake's run id, one per workflow run) -> states of the jobs sacct knows."""
    out = subprocess.run(["sacct", "-X", "-n", "--parsable2", "--format=JobIdRaw,JobName,State,Comment",
                          "--starttime", "now-1hour"], env=env, capture_output=True, text=True, check=True)
    rows = [line.split("|") for line in out.stdout.splitlines() if line]
    return {job_id: [name, state.split()[0], comment] for job_id, name, state, comment in rows}


def _pretrain_job(env) -> str | None:
    """The id of the running pretraining job (squeue: sacct learns of a job start a little later)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k"], env=env, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        job_id, state, comment = line.split("|", 2)
        if comment.startswith("rule_pretrain") and state == "RUNNING":
            return job_id
    return None


def test_profile_runs_the_dag_on_slurm_and_a_cancelled_job_resumes(project):
    root, env = project
    log = open(root / "snakemake.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", "workflow/profiles/slurm",
                             "--slurm-init-seconds-before-status-checks", "5", *TARGETS],
                            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        state_file = root / "models" / "smoke" / RUN / "checkpoint" / "state.pt"
        deadline = time.monotonic() + 300
        job = None
        while time.monotonic() < deadline and proc.poll() is None:
            job = _pretrain_job(env)
            if job and state_file.exists():
                break
            time.sleep(0.2)
        assert job and state_file.exists(), f"no running pretraining job with a checkpoint:\n{_tail(root)}"
        subprocess.run(["scancel", f"{job}.0"], env=env, check=True)  # the step running `leanlm pretrain`
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert rc == 0, _tail(root)

    for target in TARGETS:
        assert (root / target).stat().st_size > 0
    record = json.loads((root / "results" / "smoke" / "runs" / RUN / "pretrain.json").read_text())
    summary = json.dumps(record)
    # The second job went on from the first one's checkpoint, not from step 0.
    resumed = _find(record, "resumed_from")
    assert resumed is not None and EVERY <= resumed < STEPS, summary
    assert json.loads((root / "results" / "smoke" / "runs" / RUN / "glue.json").read_text())

    jobs = _sacct(env)
    states = {job_id: state for job_id, (_, state, comment) in jobs.items()}
    assert states[job] == "FAILED", jobs
    pretrain = [s for s, c in ((s, c) for (_, s, c) in jobs.values()) if "pretrain" in c]
    finetune = [s for s, c in ((s, c) for (_, s, c) in jobs.values()) if "finetune" in c]
    assert pretrain.count("COMPLETED") == 1 and finetune == ["COMPLETED"], jobs
    # The light rules ran where Snakemake ran (localrules), not as SLURM jobs.
    assert not [c for (_, _, c) in jobs.values() if "aggregate" in c or "render" in c], jobs
    # Nothing left queued or running.
    squeue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, check=True)
    assert squeue.stdout.strip() == ""


def _find(record, key):
    if isinstance(record, dict):
        if key in record:
            return record[key]
        for value in record.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None


def _tail(root: Path) -> str:
    return (root / "snakemake.log").read_text()[-5000:]
