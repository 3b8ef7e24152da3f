"""The check's record, ``<out>/gpu_check.json``, and the rules every sub-step runs under.

A section is a list of sub-steps. Before a sub-step starts, its section checks the time left: the
section's share of ``--budget-s`` plus whatever the sections before it left unused, never past the
check's own deadline. A sub-step that would not fit (its ``need_s``, an estimate of its shortest run) is
recorded as skipped with the reason, and the next one is tried. A sub-step that raises is recorded with
the exception's type, message and the tail of its traceback, and the check goes on; an out-of-memory
error is recorded as ``oom`` and the CUDA cache is emptied before the next sub-step; a command stopped
because it outlasted its section's time (:class:`OutOfBudget`) is ``timeout``. The whole record
is written atomically after every sub-step, so a check killed by a timeout keeps what it had done.
"""

from __future__ import annotations

import datetime
import gc
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from leanlm.io import write_json

SCHEMA_VERSION = 1
RECORD_NAME = "gpu_check.json"
TRACEBACK_LINES = 25  # the tail of a failed sub-step's traceback kept in the record


class OutOfBudget(RuntimeError):
    """A sub-step stopped because it outlasted the time its section had left (recorded as ``timeout``)."""


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is a device out-of-memory error (torch's own class, or the allocator's message
    raised as a plain RuntimeError by a kernel or an extension)."""
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


def error_record(exc: BaseException) -> dict[str, Any]:
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    return {"type": type(exc).__name__, "message": str(exc).strip()[:4000],
            "traceback": lines[-TRACEBACK_LINES:]}


def _release_device_memory() -> None:
    """After a failed sub-step: drop what its frames held and give the cached blocks back, so the next
    sub-step starts from an empty device."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class CheckRecord:
    """The JSON document and its sections; ``write()`` replaces the file atomically."""

    def __init__(self, out_dir: Path, head: dict[str, Any], budget_s: float, shares: dict[str, float],
                 clock: Callable[[], float] = time.monotonic, echo: Callable[[str], None] = print):
        self.path = Path(out_dir) / RECORD_NAME
        self.clock, self.echo = clock, echo
        self.started = clock()
        self.budget_s = float(budget_s)
        self.shares = dict(shares)
        self._spent_shares = 0.0  # shares of the sections begun so far
        self.doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "started": now_iso(), "finished": None,
                                    "budget_s": self.budget_s, "budget_shares": self.shares, **head,
                                    "sections": {}}
        self.write()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def write(self) -> None:
        self.doc["elapsed_s"] = round(self.elapsed(), 3)
        write_json(self.path, self.doc)

    def section(self, name: str, title: str) -> "Section":
        """Begin section ``name``: its deadline is the end of its share counted from the check's start
        (so time an earlier section left unused carries over), capped by the check's deadline."""
        self._spent_shares += self.shares[name]
        deadline = self.started + min(self.budget_s, self._spent_shares * self.budget_s)
        return Section(self, name, title, deadline)

    def finish(self) -> None:
        self.doc["finished"] = now_iso()
        self.write()


class Section:
    def __init__(self, record: CheckRecord, name: str, title: str, deadline: float):
        self.record, self.name, self.deadline = record, name, deadline
        self.started = record.clock()
        self.doc: dict[str, Any] = {"title": title, "allowance_s": round(deadline - self.started, 3),
                                    "steps": {}}
        record.doc["sections"][name] = self.doc
        record.write()

    def remaining(self) -> float:
        return self.deadline - self.record.clock()

    def note(self, key: str, value: Any) -> None:
        """A section-level field (what the steps share: the configuration, how FLOPs are counted)."""
        self.doc[key] = value
        self.record.write()

    def skip(self, step: str, reason: str) -> None:
        self._store(step, {"status": "skipped", "reason": reason})

    def run(self, step: str, fn: Callable[[], dict[str, Any]], need_s: float) -> dict[str, Any] | None:
        """Run sub-step ``step`` (``fn`` returns its fields) if ``need_s`` seconds are left; record what
        happened. Returns the fields of a sub-step that ran to the end, else None."""
        left = self.remaining()
        if need_s > 0 and left < need_s:  # need 0: a step too cheap to budget (the device's description)
            self.skip(step, f"budget: needs about {need_s:.0f} s, {max(left, 0.0):.0f} s left of this "
                            f"section's share of --budget-s")
            return None
        started = self.record.clock()
        failure: dict[str, Any] | None = None
        try:
            fields = fn()
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and the check goes on
            status = "timeout" if isinstance(exc, OutOfBudget) else "oom" if is_oom(exc) else "error"
            failure = {"status": status, "error": error_record(exc)}
            fields = None
        seconds = round(self.record.clock() - started, 3)
        if failure is not None:
            _release_device_memory()  # after the except block: the traceback's frames are gone
            self._store(step, {**failure, "seconds": seconds})
            return None
        self._store(step, {"status": "ok", "seconds": seconds, **(fields or {})})
        return fields

    def _store(self, step: str, entry: dict[str, Any]) -> None:
        self.doc["steps"][step] = entry
        self.doc["elapsed_s"] = round(self.record.clock() - self.started, 3)
        self.record.write()
        status = entry["status"]
        why = entry.get("reason") or (entry.get("error") or {}).get("message", "")
        line = f"gpu-check {self.name}/{step}: {status}"
        if "seconds" in entry:
            line += f" ({entry['seconds']:.1f} s)"
        if status != "ok" and why:
            line += f": {why.splitlines()[0][:200]}"
        self.record.echo(line)
