"""The slurm profile on a real SLURM: Debian's slurm-wlm 22.05 with slurmdbd (so sacct has accounting) and
munge, started for this one machine by scripts/slurm_local.sh (installed with apt-get when missing) and
stopped at the end; the test cluster has the account `myproject` docs/cluster.md's example exports.

docs/cluster.md's cluster commands run verbatim (read from its "On a SLURM cluster" block, each line after the
`export` line in one bash), with no edit to the profiles or the Snakefile and no command-line overrides:

- `snakemake -n --profile workflow/profiles/slurm --configfile params/paper.yaml` on the project's own
  params: it lists the paper profile's jobs with their GPUs, partition, account and time limits, and
  submits nothing;
- `snakemake --profile workflow/profiles/slurm` on a tiny smoke profile (one BERT run, GLUE on one task,
  one table: the test's params, a two-minute time limit per pretraining job by default): pretraining and fine-tuning
  run as SLURM jobs, data, aggregation, claims, the table and the PDF locally. The first pretraining job's
  job step is cancelled with scancel once it has a checkpoint (the job ends FAILED); the second one is
  frozen (SIGSTOP) once it has written a later checkpoint, so that SLURM ends it at its time limit
  (TIMEOUT); the resubmitted job resumes from that checkpoint. sacct must show FAILED, TIMEOUT and
  COMPLETED pretraining jobs, all charged to `myproject`; the finished run's checkpoint is gone once
  Snakemake has recorded the outputs.

Why the step and not the whole job: a job cancelled as a whole ends in sacct state "CANCELLED by <uid>",
which snakemake-executor-plugin-slurm 2.8.0 compares with "CANCELLED" and so takes for a job still running:
Snakemake then waits for ever (seen here). A job that reaches its time limit (TIMEOUT) or fails is retried.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fake_wheels import pin_fake_wheels, write_fake_wheels
from slurm_lock import slurm_cluster_lock

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
RUN = "ch3_encoder-mha"
STEPS, EVERY = 500, 50
# Time limit of a pretraining job, minutes: room for a job's start (the job's own Snakemake reads the workflow,
# leanlm imports torch) and a checkpoint; a heavily loaded machine needs more (LEANLM_TEST_SLURM_MINUTES).
MINUTES = int(os.environ.get("LEANLM_TEST_SLURM_MINUTES", "2"))
ACCOUNT = "myproject"  # docs/cluster.md's example

pytestmark = pytest.mark.slow


def readme_commands() -> tuple[str, str, str]:
    """docs/cluster.md's cluster block: its `export` line, the paper dry run and the smoke run, as written."""
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    section = text.split("## On a SLURM cluster", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    exports = [line for line in lines if line.startswith("export ")]
    dry = [line for line in lines if line.startswith("snakemake -n ")]
    run = [line for line in lines if line.startswith("snakemake ") and " -n " not in f"{line} "]
    assert len(exports) == 1 and len(dry) == 1 and len(run) == 1, block
    return exports[0], dry[0], run[0]


def test_the_readmes_cluster_lines_are_the_tested_ones():
    """The README shows the SLURM lines too: each must be one that docs/cluster.md's block runs here."""
    _, dry, run = readme_commands()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = [line.split("#", 1)[0].strip() for line in readme.splitlines()
             if line.startswith("snakemake") and "workflow/profiles/slurm" in line]
    assert shown and set(shown) <= {dry, run}, shown


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node SLURM: the environment (SLURM_CONF) its clients need."""
    if os.geteuid() != 0:
        pytest.fail("the SLURM test starts slurmctld/slurmd/slurmdbd as root (and apt-get installs them)")
    state = Path("/tmp") / f"leanlm-slurm-{os.getpid()}"  # short: munge/slurm socket paths have a length limit
    with slurm_cluster_lock():  # test_slurm_local.py's cluster may be up in another test process
        try:
            out = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True,
                                 timeout=600)
            assert out.returncode == 0, f"slurm_local.sh start failed:\n{out.stderr[-3000:]}"
            env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
            for args in (["add", "account", ACCOUNT], ["add", "user", "root", f"account={ACCOUNT}"]):
                subprocess.run(["sacctmgr", "-i", *args], env=env, check=True, capture_output=True, timeout=60)
            yield env
        finally:
            subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)
            shutil.rmtree(state, ignore_errors=True)


def _copy_project(root: Path) -> Path:
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", root / ".dvc" / "config")
    shutil.copytree(ROOT / "params", root / "params")
    shutil.copytree(ROOT / "profiles", root / "profiles")
    for sub in ("rules", "schemas", "templates", "profiles", "leanlm"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def _env(slurm: dict, root: Path) -> dict:
    # snakemake and leanlm from the environment running the tests, activated or not (make test is not)
    return {**slurm, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), slurm.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "workflow"), os.environ.get("PYTHONPATH")]))}


def _readme(command: str) -> list[str]:
    """docs/cluster.md's `export` line and ``command``, run as written by one bash."""
    export, _, _ = readme_commands()
    return ["bash", "-c", f"set -e\n{export}\n{command}"]


def _tiny(params: Path) -> None:
    """One BERT run (MHA), GLUE on one task, Table 3.1 only; a two-minute time limit per pretraining job and
    enough steps (STEPS) to cancel one job and time out another after their checkpoints."""
    ch3 = params / "experiments" / "ch3.yaml"
    doc = yaml.safe_load(ch3.read_text())
    doc["ch3_encoder"] = {"chapter": 3, "title": "ch3_encoder", "backbone": "bert", "objective": "mlm",
                          "finetune": ["glue"], "runs": {"mha": {"attention": "mha"}}}
    ch3.write_text(yaml.safe_dump(doc, sort_keys=False))
    tables = params / "tables.yaml"
    lines = tables.read_text().splitlines(keepends=True)
    tables.write_text("".join(line for line in lines if not re.match(r"[a-z0-9_]+:", line)
                              or line.startswith("table_3_1:")))
    # The claims stage checks every run a claim names against the matrix, and this matrix has one run: one
    # claim on it (the run against itself), so the claims rule runs here as in the README's run.
    (params / "claims.yaml").write_text(yaml.safe_dump({"claims": [{
        "id": "ch3_slurm_test_one_run", "chapter": 3, "where": "tests/test_slurm.py",
        "quote": "The test's one run compared with itself, so the claims stage runs on the trimmed matrix.",
        "family": "glue", "tasks": "average", "test": "equivalent", "margin": 1.0,
        "pairs": [["ch3_encoder-mha", "ch3_encoder-mha"]]}]}, sort_keys=False))
    path = params / "smoke.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["experiments"] = ["ch3_encoder"]
    doc["seeds"] = [0]
    doc["resources"]["pretrain"].update(step_seconds=0.001, setup_minutes=MINUTES, max_runtime=MINUTES)
    doc["data"]["tokenizer"]["vocab_size"] = 600
    doc["data"]["tasks"].update(max_train_examples=48, max_eval_examples=24)
    doc["models"]["bert"].update(n_layers=1, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_position=64)
    doc["pretrain"]["mlm"].update(steps=STEPS, batch_size=8, seq_len=32, warmup_steps=1, checkpoint_every=EVERY)
    doc["finetune"]["glue"].update(tasks=["sst2"], epochs=1, batch_size=16, max_seq_len=32)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def project(tmp_path_factory, slurm):
    # On the file system the SLURM jobs share with this process (the same machine here).
    root = _copy_project(tmp_path_factory.mktemp("slurm_project"))
    _tiny(root / "params")
    write_fake_wheels(root / "cache" / "packages")
    return root, {**_env(slurm, root), **pin_fake_wheels(root / "cache" / "packages")}


def test_readme_paper_dry_run_lists_gpu_jobs_and_submits_nothing(slurm, tmp_path):
    _, dry, _ = readme_commands()
    root = _copy_project(tmp_path)  # the project's own params: the paper profile as shipped
    env = _env(slurm, root)
    proc = subprocess.run(_readme(dry), cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert int(counts["pretrain"]) > 100 and int(counts["finetune"]) > 100, counts
    blocks = re.split(r"^\[\w{3} \w{3} .*\]$", out, flags=re.M)  # one block per job, after its [date] line
    pretrain = [b for b in blocks if re.search(r"^rule pretrain:", b, re.M)
                and re.search(r"^\s+wildcards: profile=paper, run_id=ch3_encoder-mha$", b, re.M)]
    assert len(pretrain) == 1, pretrain
    assert pretrain, out[-3000:]
    # A 1M-step BERT run: one GPU on the gpu partition, the README's account, the 48 h cap (it chains).
    for want in ("gpu=1", "slurm_partition=gpu", f"slurm_account={ACCOUNT}", "runtime=2880", "mem_mb=64000"):
        assert want in pretrain[0], pretrain[0]
    data = [b for b in blocks if re.search(r"^rule data:", b, re.M)]  # a localrule: nothing asked of SLURM
    assert data and "gpu=" not in data[0] and "slurm_partition" not in data[0], data
    squeue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, check=True)
    assert squeue.stdout.strip() == ""


def _sacct(env) -> dict[str, list[str]]:
    """Job id -> [name, state, comment (Snakemake's rule and wildcards), account] of the jobs sacct knows."""
    out = subprocess.run(["sacct", "-X", "-n", "--parsable2", "--format=JobIdRaw,JobName,State,Comment,Account",
                          "--starttime", "now-6hours"], env=env, capture_output=True, text=True, check=True)
    rows = [line.split("|") for line in out.stdout.splitlines() if line]
    return {job_id: [name, state.split()[0], comment, account] for job_id, name, state, comment, account in rows}


def _pretrain_job(env, exclude=()) -> str | None:
    """The id of the running pretraining job (squeue: sacct learns of a job start a little later)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k"], env=env, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        job_id, state, comment = line.split("|", 2)
        if comment.startswith("rule_pretrain") and state == "RUNNING" and job_id not in exclude:
            return job_id
    return None


def _checkpoint_step(root: Path) -> int:
    meta = root / "models" / "smoke" / RUN / "checkpoint" / "meta.json"
    try:
        return json.loads(meta.read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def _job_processes(job: str) -> list[int]:
    """The `leanlm pretrain` processes of SLURM job ``job`` (found by their SLURM_JOB_ID)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in environ and b"pretrain" in cmdline and b"python" in cmdline:
            found.append(int(proc.name))
    return found


def _wait(what: str, ready, proc: subprocess.Popen, root: Path, timeout: float = 2400):  # a loaded machine is slow
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        value = ready()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} never happened:\n{_tail(root)}")


def test_readme_smoke_run_on_slurm_chains_a_cancelled_and_a_timed_out_job(project):
    root, env = project
    _, _, run = readme_commands()
    log = open(root / "snakemake.log", "w")
    proc = subprocess.Popen(_readme(run), cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    frozen = []
    try:
        # 1. The first job, once it has a checkpoint: its job step cancelled (the job ends FAILED).
        first = _wait("a running pretraining job with a checkpoint",
                      lambda: _checkpoint_step(root) and _pretrain_job(env), proc, root)
        cancelled_at = _checkpoint_step(root)
        subprocess.run(["scancel", f"{first}.0"], env=env, check=True)  # the step running `leanlm pretrain`
        # 2. The resubmitted job, once it has gone on past that checkpoint: frozen until SLURM ends it at its
        # two-minute limit (TIMEOUT).
        second = _wait("a resubmitted pretraining job", lambda: _pretrain_job(env, exclude={first}), proc, root)
        started_at = max(_checkpoint_step(root), cancelled_at)
        frozen_at = _wait("a checkpoint of the resubmitted job",
                          lambda: _checkpoint_step(root) if _checkpoint_step(root) > started_at else 0, proc, root)
        frozen = _job_processes(second)
        assert frozen, f"no leanlm process of job {second}"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        rc = proc.wait(timeout=3600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)  # SLURM has killed them already; never leave one stopped
            except ProcessLookupError:
                pass
        log.close()
    assert rc == 0, _tail(root)

    for target in ("paper_tables/smoke/table_3_1.tex", "paper_tables/smoke/tables.pdf",
                   "paper_tables/smoke/claims.md", "results/smoke/all_runs.csv"):
        assert (root / target).stat().st_size > 0, target
    record = json.loads((root / "results" / "smoke" / "runs" / RUN / "pretrain.json").read_text())
    # The last job went on from the timed-out job's checkpoint (or a later one), never from step 0.
    assert frozen_at <= record["summary"]["resumed_from"] < STEPS, record["summary"]
    assert json.loads((root / "results" / "smoke" / "runs" / RUN / "glue.json").read_text())
    # Recorded by Snakemake, so the Snakefile's hook deleted the finished run's checkpoint.
    assert not (root / "models" / "smoke" / RUN / "checkpoint").exists()

    jobs = _sacct(env)
    assert jobs[first][1] == "FAILED" and jobs[second][1] == "TIMEOUT", jobs
    pretrain = [state for _, state, comment, _ in jobs.values() if comment.startswith("rule_pretrain")]
    finetune = [state for _, state, comment, _ in jobs.values() if comment.startswith("rule_finetune")]
    assert pretrain[-1] == "COMPLETED" and pretrain.count("COMPLETED") == 1, jobs
    assert set(pretrain) <= {"FAILED", "TIMEOUT", "COMPLETED"} and finetune == ["COMPLETED"], jobs
    assert {account for *_, account in jobs.values()} == {ACCOUNT}, jobs
    # The light rules ran where Snakemake ran (localrules), not as SLURM jobs.
    assert len(pretrain) + len(finetune) == len(jobs), jobs
    # Nothing left queued or running.
    squeue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, check=True)
    assert squeue.stdout.strip() == ""


def _tail(root: Path) -> str:
    return (root / "snakemake.log").read_text()[-5000:]
