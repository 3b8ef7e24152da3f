"""How one of torchrun's processes ends (leanlm.cli.main with leanlm.process_end.end_process).

A process torchrun started (WORLD_SIZE > 1) must not reach interpreter finalization (gloo's worker
threads, kept alive by DDP's references to the group, can abort it there: see leanlm.process_end). These
run the real ``leanlm.cli.main`` entry in a fresh interpreter with torchrun's WORLD_SIZE and a stand-in
command (no group is started: real 2-process runs are in tests/test_multigpu.py), and check that what a
normal exit does still happens: the exit code, atexit handlers, buffered output, an uncaught
exception's traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading
    from leanlm import cli
    from leanlm.commands import data as data_commands

    atexit.register(lambda: print("atexit ran", flush=True))
    # run by threading as the interpreter begins to finalize, never after os._exit
    threading._register_atexit(lambda: print("finalizing", flush=True))

    def job(args):
        print("buffered, no newline", end="")
        outcome = {outcome!r}
        if outcome == "raise":
            raise RuntimeError("boom in the job")
        if outcome == "exit3":
            sys.exit(3)
        if outcome == "exit-none":
            sys.exit()
        if outcome == "exit-message":
            sys.exit("a message for the user")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        if outcome == "leanlm-error":
            from leanlm.errors import ConfigError
            raise ConfigError("a clear message")

    data_commands.cmd_validate = job  # build_parser binds `leanlm validate` to it
    sys.argv = ["leanlm", "validate", "--params", "params/smoke.yaml"]
    sys.exit(cli.main())
""")


def _main(outcome: str, world_size: str | None = "2") -> subprocess.CompletedProcess:
    script = SCRIPT.format(outcome=outcome)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LEANLM_FORKSERVER")}
    env.update(PYTHONPATH=str(REPO / "workflow"), **({"WORLD_SIZE": world_size} if world_size else {}))
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("outcome, code", [("ok", 0), ("leanlm-error", 2), ("exit3", 3), ("exit-none", 0),
                                           ("exit-message", 1), ("raise", 1), ("interrupt", 130)])
def test_torchrun_process_exits_with_its_code_without_finalizing(outcome, code):
    done = _main(outcome)
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith("buffered, no newline"), done.stdout  # flushed before os._exit
    assert "atexit ran" in done.stdout and "finalizing" not in done.stdout, done.stdout
    if outcome == "raise":  # the traceback a normal exit would print
        assert "Traceback" in done.stderr and "RuntimeError: boom in the job" in done.stderr, done.stderr
    if outcome == "interrupt":
        assert "KeyboardInterrupt" in done.stderr, done.stderr
    if outcome == "exit-message":
        assert done.stderr.strip() == "a message for the user", done.stderr
    if outcome == "leanlm-error":
        assert "leanlm validate: error: a clear message" in done.stderr, done.stderr


@pytest.mark.parametrize("world_size", [None, "1"])
def test_single_process_finalizes_as_usual(world_size):
    done = _main("raise", world_size)
    assert done.returncode == 1 and "RuntimeError: boom in the job" in done.stderr, done.stderr
    assert "finalizing" in done.stdout and "atexit ran" in done.stdout, done.stdout  # the check above can see it
