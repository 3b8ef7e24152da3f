"""How one of torchrun's processes ends: as a normal exit would, but without interpreter finalization.

Why: DDP holds references to the process group that outlive it and ``destroy_process_group`` (torch
2.13: a group DDP used keeps about 10 Python references after the DDP object is gone), so gloo's worker
threads run until the process ends. A worker that drops a finished collective's tensors must take the
GIL to release them; if the interpreter is finalizing by then, CPython ends that thread and C++ aborts
the whole process ("terminate called without an active exception", SIGABRT) after the job's outputs
were written, and torchrun reports the job failed: about 1 run in 10 on a 2-core machine. Ending with
``os._exit`` after what a normal exit does removes that window. Every output is written and closed
atomically before this point, so nothing is lost.

Kept out of leanlm.training (only ``leanlm.cli`` imports it), so that it is in no job's code fingerprint.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import traceback
from typing import NoReturn


def under_torchrun() -> bool:
    """Whether this process is one of several that torchrun started (WORLD_SIZE > 1)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False  # the command itself reports the bad value (leanlm.training.distributed)


def exit_code(exc: BaseException) -> int:
    """Report an exception that ends the process as the interpreter would, and return its exit code:
    ``SystemExit``'s code (None is 0; another object is printed, and is 1), 130 for Ctrl-C (as a shell
    reports SIGINT; the interpreter would re-raise the signal), else the traceback and 1."""
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    traceback.print_exception(exc)
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


def end_process(code: int) -> NoReturn:
    """Run the atexit handlers (logging's shutdown among them), flush the standard streams, and exit
    with ``code`` without finalizing the interpreter."""
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)
