"""The warm leanlm of local Snakemake runs (leanlm.forkserver): a delegated job behaves as its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leanlm import forkserver

REPO = Path(__file__).resolve().parents[1]
# A `leanlm` client that also reports whether it imported torch itself: a delegated `validate` must not
# (the server's child does the work), an in-process one must.
CLIENT = ("import sys; from leanlm.cli import main; code = main(); "
          "sys.stderr.write('TORCH_IN_CLIENT=%s\\n' % ('torch' in sys.modules)); sys.exit(code)")


@pytest.fixture(scope="module")
def server():
    started = forkserver.start(preload=("numpy",))
    assert started is not None, "the fork server did not come up"
    yield started
    forkserver.stop(started)
    assert not Path(started[1]).parent.exists()


def client(args, socket_path=None, cwd=REPO, **env):
    environ = {k: v for k, v in os.environ.items() if k != forkserver.ENV}
    if socket_path:
        environ[forkserver.ENV] = socket_path
    environ.update(env)
    return subprocess.run([sys.executable, "-c", CLIENT, *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=120)


def test_delegated_job_prints_what_the_in_process_job_prints(server):
    direct = client(["validate"])
    delegated = client(["validate"], server[1])
    assert direct.returncode == delegated.returncode == 0, delegated.stderr
    assert delegated.stdout == direct.stdout
    assert "TORCH_IN_CLIENT=True" in direct.stderr
    assert "TORCH_IN_CLIENT=False" in delegated.stderr


def test_exit_status_and_error_message_come_back(server):
    result = client(["validate", "--params", "params/no_such_profile.yaml"], server[1])
    assert result.returncode == 2
    assert "no_such_profile.yaml does not exist" in result.stderr
    assert "TORCH_IN_CLIENT=False" in result.stderr


def test_delegated_job_reports_its_own_usage_last(server):
    """Snakemake's benchmark sees only the client: the forked job's usage comes back as its last stderr line
    (before this test client's own TORCH_IN_CLIENT line); a job in its own process prints none."""
    delegated = client(["validate"], server[1])
    lines = delegated.stderr.splitlines()
    usage = forkserver.parse_usage(lines[-2])
    assert usage is not None and usage["cpu_time"] > 0 and usage["max_rss"] > 0, delegated.stderr
    assert lines[-1] == "TORCH_IN_CLIENT=False"
    assert forkserver.USAGE_PREFIX not in client(["validate"]).stderr


def test_job_sees_the_clients_directory_and_environment(server, scratch_root):
    result = client(["validate"], server[1], cwd=scratch_root, LEANLM_ROOT=str(scratch_root))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{scratch_root / 'params' / 'smoke.yaml'}: valid")
    assert "TORCH_IN_CLIENT=False" in result.stderr


def test_client_with_other_import_time_environment_runs_in_its_own_process(server):
    flipped = "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"
    result = client(["validate"], server[1], HF_HUB_OFFLINE=flipped)
    assert result.returncode == 0
    assert "not using the fork server" in result.stderr and "HF_HUB_OFFLINE" in result.stderr
    assert "TORCH_IN_CLIENT=True" in result.stderr


def test_per_job_thread_counts_do_not_refuse_the_server(server):
    """Snakemake exports OMP/MKL/OpenBLAS thread counts per job; the child applies them itself."""
    result = client(["validate"], server[1], OMP_NUM_THREADS="1", MKL_NUM_THREADS="3", OPENBLAS_NUM_THREADS="2")
    assert result.returncode == 0, result.stderr
    assert "TORCH_IN_CLIENT=False" in result.stderr


def test_child_applies_the_thread_count(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        # Not 1 beforehand (make test already runs one thread), so the child's own setting shows. No op
        # runs at 3 threads, so no OpenMP pool is started in this test process.
        torch.set_num_threads(3)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        forkserver._apply_thread_count()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_no_server_means_in_process(monkeypatch, tmp_path):
    monkeypatch.delenv(forkserver.ENV, raising=False)
    assert forkserver.delegate(["validate"]) is None
    monkeypatch.setenv(forkserver.ENV, str(tmp_path / "gone.sock"))
    assert forkserver.delegate(["validate"]) is None
    monkeypatch.setenv(forkserver.ENV, "off")
    assert forkserver.delegate(["validate"]) is None


def test_server_exits_when_its_parent_is_gone(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    sock = tmp_path / "s.sock"
    server = subprocess.Popen([sys.executable, "-m", "leanlm.forkserver", "serve", "--socket", str(sock),
                               "--parent", str(parent.pid), "--preload", ""])
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sock.exists()
        parent.wait()
        assert server.wait(timeout=30) == 0
        assert not sock.exists()
    finally:
        for proc in (parent, server):
            if proc.poll() is None:
                proc.kill()


def test_import_time_env_selects_library_switches():
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/bin", "MPLBACKEND": "Agg", "TORCH_HOME": "/t",
           "MKL_NUM_THREADS": "1"}
    assert forkserver.import_time_env(env) == {"HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg", "TORCH_HOME": "/t"}
