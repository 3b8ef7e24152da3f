# leanlm: reproduce Xue (2025) end to end. See README.md.
#
#   snakemake --cores all                                   # default: the smoke profile (CPU, minutes)
#   snakemake --cores all --configfile params/paper.yaml     # the thesis's scale (GPUs)
#   snakemake --cores 1 analytic [--configfile ...]          # counting tables/figures only, seconds
#   snakemake --cores 2 --configfile params/signal.yaml --config subset=cpu   # signal's CPU subset
#   snakemake --profile workflow/profiles/slurm --configfile params/paper.yaml
#
# Snakemake itself loads profiles/default (all cores, greedy scheduler, printed commands) for every run here.
# The profile file is validated (workflow/schemas/) before any job runs. Every rule runs a `leanlm`
# command; every hyperparameter reaches a rule through `params:` (only the sub-dict it needs), so a
# changed value reruns exactly the jobs that depend on it.
#
# Every job writes its whole output to logs/<profile>/<rule>/<wildcards>.log, and the heavy rules time
# themselves into benchmarks/<profile>/... (Snakemake's `benchmark:`), so the terminal shows Snakemake's
# progress only. At the end of a run benchmarks/<profile>/summary.md sums the benchmarks up and, after a
# failure, the last lines of each failed job's log are printed (leanlm/run_summary.py).

import os
import shlex
import shutil
import sys
from pathlib import Path

from leanlm import cluster, forkserver
from leanlm.config import load_config
from leanlm.job_code import finetune_code, pretrain_code, render_code
from leanlm.provenance import code_of, code_version
from leanlm.reporting.pretraining_speed import speed_runs, speed_settings, speed_steps
from leanlm.reporting.tables_file import load_tables
from leanlm.runs import pretrain_settings, runs

PARAMS_FILE = workflow.configfiles[-1] if workflow.configfiles else "params/smoke.yaml"
# `--config subset=<name>`: only the experiments of the profile's named subset (e.g. signal's `cpu`).
SUBSET = config.get("subset") or None
CFG = load_config(PARAMS_FILE, subset=SUBSET)
PROFILE = CFG["profile"]
# every pretrained model, each further pretraining replica (profile key pretrain_seeds) a run of its own
RUNS = {run.run_id: run for run in runs(CFG, with_replicas=True)}
# UTF-8, no repeated key; every renderer a function of leanlm.reporting (a renderer is code a params file names)
TABLES = load_tables("params/tables.yaml")

# Rules call `leanlm`/`dvc` from the environment Snakemake itself runs in, even when it was started
# as .venv/bin/snakemake without activating the venv.
shell.prefix(f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"; set -euo pipefail; ')

wildcard_constraints:
    profile=PROFILE,
    run_id="|".join(sorted(RUNS, key=len, reverse=True)) or "NONE",
    family="[a-z0-9_]+",


# Local runs: one warm leanlm process forks every job (leanlm/forkserver.py), which saves the ~3 s of
# imports each of the several hundred jobs would pay. LEANLM_FORKSERVER=off turns it off.
SERVER = {}


def remove_finished_checkpoints():
    """Delete the training checkpoint of each run whose pretraining outputs Snakemake has recorded as
    finished (leanlm/snakemake_records.py). The pretraining job leaves its final checkpoint behind: deleted
    by the job itself, a kill between that and Snakemake's record would make the rerun train from step 0.
    Run before the jobs (a changed setting then never meets the old run's state) and at the end."""
    from leanlm.snakemake_records import remove_finished_checkpoints as remove

    runs = {run: (f"models/{PROFILE}/{run}",
                  [str(f.apply_wildcards({"profile": PROFILE, "run_id": run})) for f in rules.pretrain.rule.output])
            for run in RUNS}
    removed = remove(Path.cwd(), runs)
    if removed:
        print(f"leanlm: removed the training checkpoints of {len(removed)} finished run(s)", file=sys.stderr)


onstart:
    remove_finished_checkpoints()
    if not workflow.local_exec:
        # On a cluster a pretraining run longer than one job's time limit chains jobs, each resuming from
        # the last checkpoint: the pretrain rule is resubmitted as often as the longest run can need
        # (leanlm.cluster.pretrain_retries; the profile's `retries` applies to the other rules). Set here,
        # not as the rule's `retries:`, because the Snakefile is read before the executor is known and a
        # local run must not retry a failing job.
        rules.pretrain.rule.restart_times = cluster.pretrain_retries(
            pretrain_settings(CFG, run) for run in RUNS.values())
    if workflow.local_exec and os.environ.get(forkserver.ENV) != "off":
        SERVER["server"] = forkserver.start()
        if SERVER["server"]:
            os.environ[forkserver.ENV] = SERVER["server"][1]


def summarize_benchmarks():
    from leanlm.run_summary import write_summary

    summary = write_summary(f"benchmarks/{PROFILE}", f"logs/{PROFILE}")
    if summary:
        print(f"leanlm: benchmarks of the jobs so far: {summary}", file=sys.stderr)


def report_failures():
    """The end of each failed job's log. Snakemake prints a failed job's log path as it fails, but not
    what the log says; its scheduler keeps the failed jobs."""
    from leanlm.run_summary import failure_report

    jobs = getattr(workflow.scheduler, "failed", None)
    if jobs is None:  # a Snakemake whose scheduler keeps no such list
        print("leanlm: see the failed jobs' logs named in Snakemake's error messages above", file=sys.stderr)
        return
    failed = []
    for job in jobs:
        wildcards = ", ".join(f"{k}={v}" for k, v in job.wildcards_dict.items())
        failed.append((f"rule {job.rule.name}" + (f" ({wildcards})" if wildcards else ""), [str(log) for log in job.log]))
    if failed:
        print(failure_report(failed), file=sys.stderr)


onsuccess:
    forkserver.stop(SERVER.pop("server", None))
    remove_finished_checkpoints()
    summarize_benchmarks()
    # The claims' verdicts (paper_tables/<profile>/claims.md has the details), then where the report is.
    from leanlm.claims.report import print_summary
    from leanlm.reporting.report_page import where_lines

    print_summary(PROFILE, CFG)
    print("\n".join(where_lines(PROFILE)))  # and last, where to look


onerror:
    forkserver.stop(SERVER.pop("server", None))
    remove_finished_checkpoints()
    report_failures()
    summarize_benchmarks()


# On a cluster (workflow/profiles/slurm) only pretraining and fine-tuning are submitted as jobs (sized by
# the profile's resources block, leanlm.cluster); the data stages (hub downloads: compute nodes may have no
# network) and the light report rules run where Snakemake runs.
localrules:
    data,
    aggregate,
    all_runs,
    experiment_baselines,
    lm_eval_baselines,
    render_table,
    render_figure,
    params_table,
    hyperparameter_tables,
    analytic_table,
    analytic_figure,
    analytic,
    pdf,
    claims,
    all,
    table,
    chapter,
    model,


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/report_page.smk"
include: "workflow/rules/targets.smk"


rule all:
    input:
        result_tables(),
        params_tables(),
        analytic_outputs(),
        claims_outputs(),
        pdf_target(),
        report_page_target(),
    default_target: True


rule analytic:
    input:
        analytic_outputs(),
