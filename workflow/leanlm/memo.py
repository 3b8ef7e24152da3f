"""Small results kept between processes in the package's ``__pycache__`` (beside Python's own bytecode, ignored
by git, one per copy of the sources), so that every ``snakemake`` call does not redo the same static work.

Planning a profile reads each source's imports (leanlm.provenance) and checks each model config against the
variants it builds (leanlm.modeling.variants): both depend only on the sources, so an entry records what it
was computed from (file times and sizes, or a key that includes them) and counts only while that holds.
A memo is loaded once per process and written once at exit, atomically (a temporary file renamed over the
old one); a missing, unreadable or half-written memo only means computing again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
from pathlib import Path

FORMAT = 1
_OPEN: dict[Path, "DiskMemo"] = {}


class DiskMemo:
    """A JSON mapping stored at ``<folder>/__pycache__/<name>``; ``entries`` is the mapping, ``changed()``
    marks it for writing at exit."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict = {}
        self._dirty = False
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("format") == FORMAT and isinstance(stored.get("entries"), dict):
                self.entries = stored["entries"]
        except (OSError, ValueError):
            pass

    def changed(self) -> None:
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        tmp = None
        try:
            self.path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"format": FORMAT, "entries": self.entries}, handle)
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def disk_memo(folder: Path, name: str) -> DiskMemo:
    """The memo ``name`` of the source folder ``folder``, loaded once per process, saved at exit."""
    path = Path(folder) / "__pycache__" / name
    memo = _OPEN.get(path)
    if memo is None:
        memo = _OPEN[path] = DiskMemo(path)
        if len(_OPEN) == 1:
            atexit.register(save_all)
    return memo


def save_all() -> None:
    for memo in _OPEN.values():
        memo.save()
