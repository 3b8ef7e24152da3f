"""scripts/slurm_local.sh stop leaves nothing running, even a job whose daemons went first.

A job that slurmd was still starting when `stop` cancelled it kept its slurmstepd and job process alive
after the daemons had gone (seen once after the SLURM test). The worst case of that is made on purpose
here, on a real single-node SLURM: a running batch job's slurmctld and slurmd are killed with SIGKILL, so
nothing is left to cancel the job, and `stop` must still end its slurmstepd and its processes. Its own
cluster (not test_slurm.py's module cluster): the two would share /etc/slurm/slurm.conf, so each holds
tests/slurm_lock.py's lock while its cluster is up (make test runs test files in parallel processes).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurm_lock import slurm_cluster_lock

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_local.sh"

pytestmark = pytest.mark.slow


def _cluster_processes(conf: Path) -> dict[int, bytes]:
    """Processes of this cluster's jobs: slurmstepd or a SLURM_JOB_ID, with this SLURM_CONF."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and f"SLURM_CONF={conf}".encode() in env and (
                cmd.startswith(b"slurmstepd") or any(v.startswith(b"SLURM_JOB_ID=") for v in env)):
            found[int(pid)] = cmd
    return found


def test_stop_ends_the_jobs_of_a_cluster_whose_daemons_died(tmp_path):
    with slurm_cluster_lock():
        _stop_ends_the_jobs_of_a_cluster_whose_daemons_died(tmp_path)


def _stop_ends_the_jobs_of_a_cluster_whose_daemons_died(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("slurm_local.sh starts slurmctld/slurmd/slurmdbd as root (and apt-get installs them)")
    state = Path("/tmp") / f"leanlm-slurm-stop-{os.getpid()}"  # short: socket paths have a length limit
    conf = state / "slurm.conf"
    try:
        out = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, f"slurm_local.sh start failed:\n{out.stderr[-3000:]}"
        env = {**os.environ, "SLURM_CONF": str(conf)}
        subprocess.run(["sbatch", "--wrap", "sleep 600", "-o", str(tmp_path / "job.out")], env=env, cwd=tmp_path,
                       check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 120
        while not any(b"sleep" in cmd for cmd in _cluster_processes(conf).values()):
            assert time.monotonic() < deadline, "the batch job never started"
            time.sleep(0.2)
        for daemon in ("slurmctld", "slurmd"):
            os.kill(int((state / f"{daemon}.pid").read_text()), signal.SIGKILL)
        time.sleep(1)
        assert _cluster_processes(conf), "the job should outlive its killed daemons"
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)
        left = _cluster_processes(conf)
        shutil.rmtree(state, ignore_errors=True)
    assert not left, f"slurm_local.sh stop left job processes running: {left}"
    assert not Path("/etc/slurm/slurm.conf").is_symlink()
