"""One pass over a project whose files are taken as unchanged: what the pass reads from disk is read once.

Loading a profile (:func:`leanlm.config.load_config`) checks every run's model and task settings, and each
check asks the same questions of the file system: which plug-in modules a folder holds, which tasks
``params/tasks/`` defines, the times of the model library's sources. Those answers are cached across calls
only while the files' times say they are unchanged, so each question still lists a folder or stats its
files: about 1,000 times per profile, most of a profile's load time (0.3 s of smoke.yaml's, measured in
docs/benchmarks.md).

Inside :func:`files_fixed` each such answer is computed once (:func:`once`) and reused until the
outermost scope ends; outside it, every call computes afresh as before. A scope is one synchronous pass
(nothing in it edits the project's sources or params files), so a file changed during it is seen by the
next pass. The scope is a context variable: a thread or task that did not open one computes afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")
_ANSWERS: ContextVar[dict | None] = ContextVar("leanlm_fixed_files", default=None)


@contextmanager
def files_fixed() -> Iterator[None]:
    """Within the block, :func:`once` computes each answer once; a nested scope shares the outer one's."""
    if _ANSWERS.get() is not None:
        yield
        return
    token = _ANSWERS.set({})
    try:
        yield
    finally:
        _ANSWERS.reset(token)


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or within :func:`files_fixed` the value it gave for ``key`` earlier in the scope (an
    error is not remembered: it is raised again, from a fresh computation, at the next call)."""
    answers = _ANSWERS.get()
    if answers is None:
        return compute()
    if key not in answers:
        answers[key] = compute()
    return answers[key]
