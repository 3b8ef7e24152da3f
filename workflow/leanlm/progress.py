"""Progress bars that suit where they are shown: a live bar on a terminal, plain lines in a log file.

Under Snakemake every job's stderr is its log file (``logs/<profile>/<rule>/...``). A tqdm bar redraws
itself with carriage returns many times a second, which in a file is one endless line of redraws; so
when stderr is not a terminal, :func:`progress` prints the bar's numbers (no bar) as a plain line at
most every :data:`LOG_INTERVAL_S` seconds, plus the first and the last. Every progress bar of leanlm
is made here.
"""

from __future__ import annotations

import re
import sys
from typing import Iterable, TextIO, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

# Seconds between progress lines in a log: a few hundred lines for an hour-long job, a line or two for
# a job of seconds.
LOG_INTERVAL_S = 30.0
_CURSOR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # tqdm moves the cursor to stack nested bars


class _Lines:
    """A file for tqdm that turns each redraw into one line of its own (redraws that only clear the
    bar, and cursor movements, are dropped)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        line = _CURSOR.sub("", text).replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(iterable: Iterable[T] | None = None, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on stderr: a bar on a terminal, periodic plain lines otherwise."""
    stream = kwargs.pop("file", None) or sys.stderr
    if _is_terminal(stream):
        return tqdm(iterable, file=stream, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    # ncols=0: the counts, rate and postfix without the bar; mininterval = maxinterval so that tqdm's
    # monitor thread does not force more frequent redraws.
    return tqdm(iterable, file=_Lines(stream), ncols=0, ascii=True,
                **{"mininterval": LOG_INTERVAL_S, "maxinterval": LOG_INTERVAL_S, **kwargs})
