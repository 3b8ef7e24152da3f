"""leanlm's terminal output for Snakemake: a logger plugin (snakemake-interface-logger-plugins), which
profiles/default turns on for every run here (``logger: [leanlm]``).

A run of the smoke matrix is ~400 jobs; Snakemake's own output gives each a block of ~10 lines and lists the
target rule's ~200 inputs twice. Here a run prints instead

- Snakemake's table of the jobs to run (per rule), then one line per finished job: ``[ 37/400] pretrain ch4_uniform-mlp (2 running, 0 failed)``;
- a failed job's error block in full, as Snakemake prints it (its log's path and command);
- warnings and errors, and Snakemake's other messages, except its per-job and per-round ones.

The Snakefile's onsuccess/onerror then print the failed jobs' log tails, the claims and where the report
is. A dry run (``-n``) prints Snakemake's own job blocks, the target rules' lists of inputs shortened to a
count. ``--logger-leanlm-verbose`` (or Snakemake's ``--verbose``) gives Snakemake's own output unchanged;
the complete log Snakemake writes to .snakemake/log/ always has it. docs/running.md: What a run prints.

Self-contained (no leanlm import): Snakemake imports every installed logger plugin to build its command
line, before any workflow is read. Snakemake finds it by its package name, snakemake_logger_plugin_<name>,
on the Python path (the editable install puts workflow/ there; pyproject.toml packages it). No `from
__future__ import annotations`: Snakemake reads the settings' field types as types to build its options."""

import logging
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

# Snakemake's messages that say nothing a reader of a run needs: one per scheduling round, and the set-up
# lines of every run (a message is dropped when it starts with one of these).
ROUTINE = ("Select jobs to execute", "Using shell:", "Assuming unrestricted shared filesystem usage",
           "Building DAG of jobs", "host:")
# The wildcard every job of a run shares: left out of its one-line name.
SHARED_WILDCARDS = ("profile",)
# A job without outputs (a target rule: all, table, chapter, model, ...) with more inputs than this has, in
# a dry run, its inputs and its reason's file lists shown as a count.
LISTED_INPUTS = 10
VERBOSE_HINT = "--logger-leanlm-verbose"


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    verbose: bool = field(default=False, metadata={
        "help": "Print Snakemake's own output (every job's block, the target rules' inputs) instead of one "
                "line per finished job (docs/running.md)."})


def job_name(rule: str, wildcards: dict) -> str:
    """A job on one line: its rule and its wildcards' values but the profile, e.g. ``finetune
    ch3_encoder-mha/glue``."""
    values = [str(value) for key, value in (wildcards or {}).items() if key not in SHARED_WILDCARDS]
    return f"{rule} {'/'.join(values)}" if values else rule


def shorten_reason(reason: str) -> str:
    """A reason's file lists as counts: ``Input files updated by another job: a, b, c`` -> ``... : 3 files``."""
    def count(match: re.Match) -> str:
        files = [f for f in match.group(2).split(", ") if f]
        return f"{match.group(1)}: {len(files)} files" if len(files) > LISTED_INPUTS else match.group(0)

    return re.sub(r"([^:;]+): ([^;]+)", count, reason)


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        from snakemake.logging import ColorizingTextHandler, DefaultFilter, DefaultFormatter

        common = self.common_settings
        # Snakemake's own stream handler, built as Snakemake builds it (logging.LoggerManager): what the
        # verbose mode and a dry run print, and how errors and warnings are printed in every mode.
        self.snakemake = ColorizingTextHandler(
            nocolor=common.nocolor, stream=sys.stdout if common.stdout else sys.stderr,
            formatter=DefaultFormatter(common.quiet, common.show_failed_logs),
            filter=DefaultFilter(common.quiet, common.debug_dag, common.verbose, common.dryrun,
                                 common.printshellcmds))
        self.verbose = bool(getattr(self.settings, "verbose", False) or common.verbose or common.debug_dag)
        self.names: dict[int, str] = {}  # job id -> its one-line name (from its JOB_INFO)
        self.running: set[int] = set()
        self.failed = 0
        self.last_finished: Optional[str] = None

    # The interface's properties: one stream handler that filters and formats on its own.
    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if self.verbose:
            self.snakemake.handle(record)
        elif self.common_settings.dryrun:
            self.snakemake.handle(self._dry_run(record))
        else:
            self._run(record)

    def _dry_run(self, record: logging.LogRecord) -> logging.LogRecord:
        """A target rule's job block with its inputs counted, not listed (the `rule all` listing)."""
        if getattr(record, "event", None) != LogEvent.JOB_INFO or record.output or len(record.input) <= LISTED_INPUTS:
            return record
        record = logging.makeLogRecord(record.__dict__)
        record.input = [f"{len(record.input)} files ({VERBOSE_HINT} lists them)"]
        record.reason = shorten_reason(record.reason)
        return record

    def _run(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO:
            self.names[record.jobid] = job_name(record.rule_name, record.wildcards)
            self.running.add(record.jobid)
        elif event == LogEvent.JOB_FINISHED:
            self.running.discard(record.job_id)
            self.last_finished = self.names.get(record.job_id, f"job {record.job_id}")
        elif event == LogEvent.PROGRESS:
            self._write(self._progress(record.done, record.total), record)
        elif event in (LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR):
            self.failed += 1
            self.running.discard(getattr(record, "jobid", None))
            self.snakemake.handle(record)  # in full: the rule, its log's path, its command
        elif event == LogEvent.RUN_INFO:  # the job stats table (jobs per rule: the run's plan), then what follows
            self.snakemake.handle(record)
            if getattr(record, "stats", None):
                self._write(f"One line per finished job ({VERBOSE_HINT}: every job's block):", record)
        elif event in (LogEvent.JOB_STARTED, LogEvent.RESOURCES_INFO, LogEvent.WORKFLOW_STARTED,
                       LogEvent.GROUP_INFO):
            return
        elif event == LogEvent.SHELLCMD or record.levelno >= logging.WARNING:
            self.snakemake.handle(record)  # shell commands when asked for (-p); warnings and errors in full
        elif event is None and str(record.msg).startswith("Trying to restart job"):
            self.failed -= 1  # a failed attempt retried (a cluster's `retries`) is not a failed job
            self.snakemake.handle(record)
        elif event is None and not str(record.msg).startswith(ROUTINE):
            self.snakemake.handle(record)

    def _progress(self, done: int, total: int) -> str:
        width = len(str(total))
        return (f"[{done:>{width}}/{total}] {self.last_finished or 'done'} "
                f"({len(self.running)} running, {self.failed} failed)")

    def _write(self, line: str, record: logging.LogRecord) -> None:
        """One plain line through Snakemake's handler (its stream, lock and filter: `--quiet progress` holds)."""
        self.snakemake.handle(logging.makeLogRecord({**record.__dict__, "msg": line, "args": None,
                                                     "event": LogEvent.RUN_INFO, "levelno": logging.INFO,
                                                     "levelname": "INFO"}))
