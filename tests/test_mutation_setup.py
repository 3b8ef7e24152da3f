"""The mutation-testing setup (`[tool.mutmut]` in pyproject.toml, docs/mutation-testing.md) forks one test
process per mutant from a server that has collected the selected test files. A fork of a process whose
torch has started its OpenMP thread pool deadlocks at the child's first parallel op (libgomp is not
fork-safe): every such mutant was reported as a "timeout" (2026-11-26). These tests keep the two things
that prevent it: the fork server, and test modules that leave torch single-threaded when imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]

FORK_SAFE_THREADS = {"jemalloc_bg_thd"}

# Reports, once collection is over, what a fork taken then would inherit: torch's thread count and the
# process's OS threads (a fork copies only the calling thread; locks the others hold stay held).
PROBE = '''
import json, os

def pytest_collection_finish(session):
    import torch
    names = sorted(open(f"/proc/self/task/{tid}/comm", encoding="utf-8").read().strip()
                   for tid in os.listdir("/proc/self/task") if int(tid) != os.getpid())
    report = {"torch_threads": torch.get_num_threads(), "other_threads": names, "collected": len(session.items)}
    with open(os.environ["LEANLM_THREAD_PROBE"], "w", encoding="utf-8") as out:
        json.dump(report, out)
'''


def test_mutants_are_forked_from_mutmuts_fork_server():
    # "fork" would fork each mutant from mutmut's own process, which has run every selected test.
    assert MUTMUT.get("process_isolation") == "forkserver"
    assert MUTMUT.get("forkserver_warmup", "collect") == "collect"


def test_collecting_the_mutation_selection_leaves_one_thread(tmp_path):
    """What the fork server does before forking (`pytest --collect-only` over the selection, as `make
    mutate` runs it: OMP_NUM_THREADS=1) must not raise torch's thread count or start a thread; a test
    module doing `torch.set_num_threads(2)` at import was how the deadlock began."""
    (tmp_path / "leanlm_thread_probe.py").write_text(PROBE, encoding="utf-8")
    report = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LEANLM_THREAD_PROBE": str(report),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    selection = MUTMUT["pytest_add_cli_args_test_selection"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "leanlm_thread_probe", *selection],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(report.read_text(encoding="utf-8"))
    assert seen["collected"] > 100, seen
    assert seen["torch_threads"] == 1, seen
    # pyarrow (imported with pandas) starts jemalloc's purging thread at import; jemalloc takes its own
    # locks around fork (pthread_atfork) and restarts the thread in the child, so it is fork-safe.
    assert set(seen["other_threads"]) <= FORK_SAFE_THREADS, seen


def test_a_rerun_drops_the_copies_of_deleted_modules(tmp_path):
    """mutmut copies the package at each run but never removes a copy: a module deleted since stayed importable
    in the mutants' tree. scripts/mutation_refresh.py removes every copy without a source before a run, and
    nothing else: not a copy older or newer than its source (mutmut copies or re-mutates those itself), not
    mutmut's results."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from mutation_refresh import main, stale_copies
    finally:
        sys.path.remove(str(REPO / "scripts"))

    src, copies = tmp_path / "src" / "leanlm", tmp_path / "mutants" / "src" / "leanlm"
    for folder in (src, copies):
        folder.mkdir(parents=True)
    for name in ("config.py", "mutated.py", "gone.py"):
        (src / name).write_text("x = 1\n")
        (copies / name).write_text("x = 1\n")
    os.utime(src / "config.py", ns=(3 * 10**18, 3 * 10**18))  # edited since the copy
    (copies / "mutated.py.meta").write_text("{}")  # mutmut's results of that module's mutants: no source
    (src / "gone.py").unlink()
    assert stale_copies(tmp_path) == [copies / "gone.py"]
    assert main([str(tmp_path)]) == 0
    assert sorted(p.name for p in copies.iterdir()) == ["config.py", "mutated.py", "mutated.py.meta"]
    assert stale_copies(tmp_path / "nowhere") == []


def test_mutate_sh_refreshes_the_copies_before_mutmut_runs():
    script = (REPO / "scripts" / "mutate.sh").read_text(encoding="utf-8")
    refresh = script.index("scripts/mutation_refresh.py")
    assert refresh < script.index("-m mutmut run")
