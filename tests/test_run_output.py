"""What a run prints on the terminal (issue 26, item 2): one line per finished job, a failed job's error
block in full, no job blocks and no `rule all` listing; a dry run keeps Snakemake's job blocks, the target
rules' inputs counted; `--logger-leanlm-verbose` gives Snakemake's own output. The logger plugin
(workflow/snakemake_logger_plugin_leanlm) is fed Snakemake's records here, then runs on a scratch project:
a tiny run, and one with a job made to fail."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.logging import ColorizingTextHandler, DefaultFilter, DefaultFormatter
from snakemake.settings.types import OutputSettings
from snakemake_interface_logger_plugins.common import LogEvent

import snakemake_logger_plugin_leanlm as plugin
from test_faults import workflow_project

REPO = Path(__file__).resolve().parents[1]
TARGETS = [f"paper_tables/smoke/table_{n}.tex" for n in range(200)]  # a target rule's ~200 inputs


def job_info(jobid: int, rule: str, wildcards: dict, inputs=(), outputs=(), log=()) -> dict:
    """A JOB_INFO record's fields, as snakemake.jobs.Job.log_info sends them."""
    reason = (f"Missing output files: {', '.join(outputs)}" if outputs
              else f"Input files updated by another job: {', '.join(inputs)}")
    return dict(event=LogEvent.JOB_INFO, jobid=jobid, rule_msg=None, rule_name=rule, local=not outputs,
                input=list(inputs), output=list(outputs), log=list(log), benchmark=None, wildcards=wildcards,
                reason=reason, resources={}, priority=0, threads=1, indent=False, is_checkpoint=False,
                printshellcmd=True, is_handover=False, shellcmd=f"leanlm {rule}")


def job_error(jobid: int, rule: str, log: str) -> dict:
    return dict(event=LogEvent.JOB_ERROR, rule_name=rule, rule_msg=None, jobid=jobid, input=[],
                output=[f"paper_tables/smoke/{rule}.tex"], log=[log], conda_env=None, container_img=None, aux={},
                indent=False, shellcmd=f"leanlm render --table {rule} > {log} 2>&1")


def record(msg, level=logging.INFO, **extra) -> logging.LogRecord:
    return logging.makeLogRecord({"msg": msg, "levelno": level, "levelname": logging.getLevelName(level), **extra})


def a_run() -> list[logging.LogRecord]:
    """The records of a run of three jobs: a pretraining, a fine-tuning that fails, and rule all."""
    return [
        record("Building DAG of jobs..."),
        record("Job stats: ...", event=LogEvent.RUN_INFO, stats={"pretrain": 1, "finetune": 1, "all": 1, "total": 3}),
        record("Provided cores: 2", event=LogEvent.RESOURCES_INFO, cores=2),
        record("Select jobs to execute..."),
        record("Execute 1 jobs...", event=LogEvent.JOB_STARTED, jobs=[2]),
        record(" Rule: pretrain, Jobid: 2", **job_info(2, "pretrain", {"profile": "smoke", "run_id": "ch3_encoder-sha"},
                                                       outputs=["models/smoke/ch3_encoder-sha/model.safetensors"],
                                                       log=["logs/smoke/pretrain/ch3_encoder-sha.log"])),
        record("Shell command: leanlm pretrain", event=LogEvent.SHELLCMD, shellcmd="leanlm pretrain"),
        record("Finished jobid: 2 (Rule: pretrain)", event=LogEvent.JOB_FINISHED, job_id=2),
        record(None, event=LogEvent.PROGRESS, done=1, total=3),
        record(" Rule: finetune, Jobid: 1", **job_info(1, "finetune", {"profile": "smoke", "run_id": "ch3_encoder-sha",
                                                                       "family": "glue"},
                                                       outputs=["results/smoke/runs/ch3_encoder-sha/glue.json"],
                                                       log=["logs/smoke/finetune/ch3_encoder-sha/glue.log"])),
        record("Error in rule finetune, jobid: 1", logging.ERROR,
               **job_error(1, "finetune", "logs/smoke/finetune/ch3_encoder-sha/glue.log")),
        record("a warning Snakemake gives", logging.WARNING),
        record(" Rule: all, Jobid: 0", **job_info(0, "all", {}, inputs=TARGETS)),
        record("Finished jobid: 0 (Rule: all)", event=LogEvent.JOB_FINISHED, job_id=0),
        record(None, event=LogEvent.PROGRESS, done=2, total=3),
        record("Nothing to be done (all requested files are present and up to date)."),
    ]


def printed(records, capsys, plugin_verbose=False, **settings) -> str:
    """What the plugin prints for ``records`` (stderr in a run, stdout in a dry run, as Snakemake's handler)."""
    common = OutputSettings(nocolor=True, stdout=settings.get("dryrun", False), **settings)
    handler = plugin.LogHandler(common, plugin.LogHandlerSettings(verbose=plugin_verbose))
    for rec in records:
        handler.handle(rec)
    out = capsys.readouterr()
    return out.out + out.err


def snakemakes_own(records, capsys, **settings) -> str:
    """What Snakemake's own stream handler prints for the same records."""
    common = OutputSettings(nocolor=True, **settings)
    handler = ColorizingTextHandler(nocolor=True, stream=sys.stderr,
                                    formatter=DefaultFormatter(common.quiet, common.show_failed_logs),
                                    filter=DefaultFilter(common.quiet, common.debug_dag, common.verbose,
                                                         common.dryrun, common.printshellcmds))
    for rec in records:
        handler.handle(rec)
    out = capsys.readouterr()
    return out.out + out.err


# ------------------------------------------------------------------------------------ the plugin alone
def test_a_run_prints_one_line_per_finished_job_and_failures_in_full(capsys):
    out = printed(a_run(), capsys)
    lines = out.splitlines()
    assert "[1/3] pretrain ch3_encoder-sha (0 running, 0 failed)" in lines, out
    assert "[2/3] all (0 running, 1 failed)" in lines, out
    # the plan (Snakemake's table of jobs per rule), then what follows
    assert lines[:2] == ["Job stats: ...", "One line per finished job (--logger-leanlm-verbose: every job's block):"]
    # no job block, no `rule all` listing, no per-round or set-up messages, no shell command (no -p)
    for absent in ("rule pretrain:", "localrule all:", "paper_tables/smoke/table_1", "Select jobs", "Execute 1",
                   "Provided cores", "Building DAG", "Shell command", "leanlm pretrain"):
        assert absent not in out, (absent, out)
    # the failure as Snakemake prints it: the rule, its log's path, its command
    error = out.split("Error in rule finetune:", 1)[1]
    assert "    log: logs/smoke/finetune/ch3_encoder-sha/glue.log (check log file(s) for error details)" in error
    assert "leanlm render --table finetune" in error
    assert "a warning Snakemake gives" in out and "Nothing to be done" in out
    assert len(lines) < 20, out


def test_a_job_is_named_by_its_rule_and_wildcards_but_the_profile():
    assert plugin.job_name("finetune", {"profile": "smoke", "run_id": "ch3_encoder-mha", "family": "glue"}) \
        == "finetune ch3_encoder-mha/glue"
    assert plugin.job_name("data_tasks_glue", {"profile": "smoke"}) == "data_tasks_glue"
    assert plugin.job_name("all", {}) == "all"


def test_a_retried_attempt_is_not_a_failed_job(capsys):
    records = [
        record(" Rule: pretrain, Jobid: 2", **job_info(2, "pretrain", {"run_id": "r"}, outputs=["m"], log=["l"])),
        record("Error in rule pretrain, jobid: 2", logging.ERROR, **job_error(2, "pretrain", "l")),
        record("Trying to restart job 2."),
        record(" Rule: pretrain, Jobid: 2", **job_info(2, "pretrain", {"run_id": "r"}, outputs=["m"], log=["l"])),
        record("Finished jobid: 2 (Rule: pretrain)", event=LogEvent.JOB_FINISHED, job_id=2),
        record(None, event=LogEvent.PROGRESS, done=1, total=1),
    ]
    out = printed(records, capsys)
    assert "[1/1] pretrain r (0 running, 0 failed)" in out.splitlines(), out
    assert "Error in rule pretrain:" in out and "Trying to restart job 2." in out


def test_printshellcmds_and_quiet_progress_still_apply(capsys):
    out = printed(a_run(), capsys, printshellcmds=True)
    assert "leanlm pretrain" in out
    from snakemake.settings.enums import Quietness

    out = printed(a_run(), capsys, quiet={Quietness.PROGRESS})
    assert "[1/3]" not in out and "Error in rule finetune:" in out


def test_verbose_prints_snakemakes_own_output(capsys):
    own = snakemakes_own(a_run(), capsys)
    assert "rule pretrain:" in own and "paper_tables/smoke/table_199.tex" in own  # what verbose must show
    assert printed(a_run(), capsys, plugin_verbose=True) == own
    # Snakemake's --verbose (its debug output) too
    assert printed(a_run(), capsys, verbose=True) == snakemakes_own(a_run(), capsys, verbose=True)


def test_a_dry_run_keeps_the_job_blocks_and_counts_a_target_rules_inputs(capsys):
    records = [r for r in a_run() if r.levelno < logging.ERROR]
    out = printed(records, capsys, dryrun=True)
    own = snakemakes_own(records, capsys, dryrun=True)
    pretrain = re.search(r"rule pretrain:\n(?:    .*\n)+", own).group(0)
    assert pretrain in out  # a job block as Snakemake prints it (the tests that read dry runs parse these)
    block = re.search(r"rule all:\n(?:    .*\n?)+", out).group(0)
    assert "    input: 200 files (--logger-leanlm-verbose lists them)" in block, block
    assert "    reason: Input files updated by another job: 200 files" in block, block
    assert "table_1" not in out and "table_1" in own


def test_snakemake_finds_the_plugin_and_its_option():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "snakemake", "--help"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--logger-leanlm-verbose" in done.stdout


def test_the_default_profile_turns_the_plugin_on():
    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert profile["logger"] == ["leanlm"]
    docs = (REPO / "docs" / "running.md").read_text()
    assert "--logger-leanlm-verbose" in docs and ".snakemake/log/" in docs


# ------------------------------------------------------------------------------- on a scratch project
def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_run_and_a_failed_run_on_the_terminal(scratch_root):
    """The hyperparameter tables of the smoke profile (a few light jobs): one line per job, none of their
    blocks; then with one table's reported values broken, that job's error and log in full, and its log's
    last lines (the Snakefile's onerror), in a short output."""
    root = workflow_project(scratch_root)
    done = run(root, "hyperparameter_tables")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    progress = re.findall(r"^\[ *(\d+)/(\d+)\] (\S+.*) \((\d+) running, (\d+) failed\)$", out, re.M)
    total = int(progress[0][1])
    assert [int(p[0]) for p in progress] == list(range(1, total + 1)), out
    assert {p[2].split()[0] for p in progress} == {"params_table", "hyperparameter_tables"}, progress
    assert not re.search(r"^(local)?rule \w+:$", out, re.M), out  # no job block
    assert len(out.splitlines()) < total + 25, out  # the plan (jobs per rule), the progress, the end
    # the complete log keeps Snakemake's own output
    complete = max((root / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    assert "localrule hyperparameter_tables:" in complete.read_text()

    (root / "params" / "reported" / "table_3_11.csv").write_text('row,pretraining\n"an unterminated quote\n')
    failed = run(root, "-f", "paper_tables/smoke/table_3_11.tex")
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0
    log = "logs/smoke/params_table/table_3_11.log"
    assert "Error in rule params_table:" in out and f"    log: {log} (check log file(s) for error details)" in out
    assert f"leanlm: rule params_table (profile=smoke, table=table_3_11) failed; last 30 lines of its log {log}:" \
        in out
    assert "ParserError" in out and not re.search(r"^(local)?rule \w+:$", out, re.M), out  # no job block
    assert len(out.splitlines()) < 80, out
