# leanlm: reproduce Xue (2025) end to end. See README.md.
#
#   snakemake --cores all                                   # default: the smoke profile (CPU, minutes)
#   snakemake --cores all --configfile params/paper.yaml     # the thesis's scale (GPUs)
#   snakemake --cores 1 analytic [--configfile ...]          # counting tables/figures only, seconds
#   snakemake --profile workflow/profiles/slurm --configfile params/paper.yaml
#
# The profile file is validated (workflow/schemas/) before any job runs. Every rule runs a `leanlm`
# command; every hyperparameter reaches a rule through `params:` (only the sub-dict it needs), so a
# changed value reruns exactly the jobs that depend on it.

import os
import shutil
import sys
from pathlib import Path

from leanlm import cluster, forkserver
from leanlm.config import load_config
from leanlm.io import load_yaml
from leanlm.provenance import code_version
from leanlm.runs import pretrain_settings, runs

PARAMS_FILE = workflow.configfiles[-1] if workflow.configfiles else "params/smoke.yaml"
CFG = load_config(PARAMS_FILE)
PROFILE = CFG["profile"]
RUNS = {run.run_id: run for run in runs(CFG)}
TABLES = load_yaml(Path("params/tables.yaml").read_text())

# Rules call `leanlm`/`dvc` from the environment Snakemake itself runs in, even when it was started
# as .venv/bin/snakemake without activating the venv.
shell.prefix(f'export PATH="{Path(sys.executable).parent}:$PATH"; set -euo pipefail; ')

wildcard_constraints:
    profile=PROFILE,
    run_id="|".join(sorted(RUNS, key=len, reverse=True)) or "NONE",
    family="[a-z0-9_]+",


# Local runs: one warm leanlm process forks every job (leanlm/forkserver.py), which saves the ~3 s of
# imports each of the several hundred jobs would pay. LEANLM_FORKSERVER=off turns it off.
SERVER = {}


onstart:
    if workflow.local_exec and os.environ.get(forkserver.ENV) != "off":
        SERVER["server"] = forkserver.start()
        if SERVER["server"]:
            os.environ[forkserver.ENV] = SERVER["server"][1]


onsuccess:
    forkserver.stop(SERVER.pop("server", None))


onerror:
    forkserver.stop(SERVER.pop("server", None))


# On a cluster (workflow/profiles/slurm) only pretraining and fine-tuning are submitted as jobs (sized by
# the profile's resources block, leanlm.cluster); the data stages (hub downloads: compute nodes may have no
# network) and the light report rules run where Snakemake runs.
localrules:
    data,
    data_corpora,
    data_tokenizers,
    aggregate,
    render_table,
    render_figure,
    params_table,
    hyperparameter_tables,
    analytic_table,
    analytic_figure,
    analytic,
    pdf,
    all,


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        result_tables(),
        params_tables(),
        analytic_outputs(),
        pdf_target(),
    default_target: True


rule analytic:
    input:
        analytic_outputs(),
