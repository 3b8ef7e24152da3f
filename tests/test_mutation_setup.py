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
import time
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
    (copies / "mutated.py.spans").write_text("{}")  # its line index of them (`mutmut show`)
    (src / "gone.py").unlink()
    assert stale_copies(tmp_path) == [copies / "gone.py"]
    assert main([str(tmp_path)]) == 0
    assert sorted(p.name for p in copies.iterdir()) == ["config.py", "mutated.py", "mutated.py.meta", "mutated.py.spans"]
    assert stale_copies(tmp_path / "nowhere") == []


def _meta(codes):
    return json.dumps({"exit_code_by_key": codes, "hash_by_function_name": {}, "durations_by_key": {}})


def test_a_test_edited_since_the_map_makes_mutmut_map_again_and_rerun_all_but_the_killed(tmp_path):
    """mutmut maps tests to functions once and never remaps a test it has seen: a test edited since to reach
    a function it did not was never run on that function's mutants, which stayed "survived". When a file under
    tests/ is newer than mutmut's stats, scripts/mutation_refresh.py drops the map and clears every result but
    a kill (mutmut's exit code 1): survived (0), no tests (33), timeout (36)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from mutation_refresh import drop_test_map, main, tests_edited_since_mapped
    finally:
        sys.path.remove(str(REPO / "scripts"))

    (tmp_path / "src").mkdir()
    tests, mutants = tmp_path / "tests", tmp_path / "mutants"
    (mutants / "src" / "leanlm").mkdir(parents=True)
    tests.mkdir()
    stats = {"tests_by_mangled_function_name": {"leanlm.m.x_f": ["tests/test_a.py::test_a"]},
             "duration_by_test": {"tests/test_a.py::test_a": 0.5}, "config_fingerprint": {"test_selection": "abc"}}
    (mutants / "mutmut-stats.json").write_text(json.dumps(stats))
    meta = mutants / "src" / "leanlm" / "m.py.meta"
    codes = {"leanlm.m.x_f__mutmut_1": 1, "leanlm.m.x_f__mutmut_2": 0, "leanlm.m.x_f__mutmut_3": 33,
             "leanlm.m.x_f__mutmut_4": 36, "leanlm.m.x_f__mutmut_5": None}
    meta.write_text(_meta(codes))
    now = time.time_ns()
    # a helper counts as much as a selected test file; a test file mutmut does not run does not count
    for name, ago in (("test_a.py", 300), ("claims_world.py", 100), ("test_b.py", 100), ("test_other.py", 100)):
        (tests / name).write_text("x = 1\n")
        os.utime(tests / name, ns=(now - ago * 10**9, now - ago * 10**9))
    os.utime(mutants / "mutmut-stats.json", ns=(now - 200 * 10**9, now - 200 * 10**9))  # the last run
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\npytest_add_cli_args_test_selection = ["tests/test_a.py", "tests/test_b.py::test_one"]\n')
    assert tests_edited_since_mapped(tmp_path) == [tests / "claims_world.py", tests / "test_b.py"]

    assert main([str(tmp_path)]) == 0
    after = json.loads((mutants / "mutmut-stats.json").read_text())
    assert after["tests_by_mangled_function_name"] == {} and after["duration_by_test"] == {}
    assert after["config_fingerprint"] == stats["config_fingerprint"]  # else mutmut resets every result itself
    assert json.loads(meta.read_text())["exit_code_by_key"] == {
        "leanlm.m.x_f__mutmut_1": 1, "leanlm.m.x_f__mutmut_2": None, "leanlm.m.x_f__mutmut_3": None,
        "leanlm.m.x_f__mutmut_4": None, "leanlm.m.x_f__mutmut_5": None}
    assert tests_edited_since_mapped(tmp_path) == []  # the stats are now newer than every test file
    meta.write_text(_meta({"leanlm.m.x_f__mutmut_2": 0}))
    assert main([str(tmp_path)]) == 0 and json.loads(meta.read_text())["exit_code_by_key"] == {"leanlm.m.x_f__mutmut_2": 0}
    assert drop_test_map(tmp_path) == 1
    assert tests_edited_since_mapped(tmp_path / "nowhere") == []  # no run yet: nothing to drop


def test_mutate_sh_refreshes_the_copies_before_mutmut_runs():
    script = (REPO / "scripts" / "mutate.sh").read_text(encoding="utf-8")
    refresh = script.index("scripts/mutation_refresh.py")
    assert refresh < script.index("-m mutmut run")
