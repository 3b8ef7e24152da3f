"""One test SLURM cluster on a machine at a time: the SLURM tests (test_slurm.py, test_slurm_local.py) each
start a cluster through scripts/slurm_local.sh, which points /etc/slurm/slurm.conf at it. `make test` runs
test files in parallel processes (pytest-xdist, --dist loadfile), and two test runs may share a machine, so
each holds this lock (flock: released by the kernel if the process dies) while its cluster is up."""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/tmp/leanlm-test-slurm.lock")


@contextmanager
def slurm_cluster_lock(timeout: float = 3600):
    with open(LOCK, "a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another test's SLURM cluster held {LOCK} for {timeout:.0f} s") from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
