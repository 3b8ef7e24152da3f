# Part of the matrix by name (docs/running.md): one table or figure, one chapter, one model. Each names the
# outputs it wants and Snakemake plans only the jobs they need: a table's experiments' runs (report.smk's
# per-experiment aggregation), nothing of the other chapters. Named through --config (targets before
# --configfile, which takes every name after it):
#
#   snakemake table --config table=table_4_1 --configfile params/smoke.yaml
#   snakemake chapter --config chapter=4 --configfile params/smoke.yaml
#   snakemake model --config run=ch3_encoder-mhe_mul --configfile params/smoke.yaml
#
# The results already on disk for the rest of the matrix stay, and a later full run reports them.

import re


def chapter_of(name):
    """The thesis chapter of a tables.yaml item: its number (table_4_1, figure_3_2), else its renderer's
    chapter package (leanlm.reporting.ch3.analytic:gpt3_projection)."""
    found = re.match(r"(?:table|figure)_(\d+)_", name) or re.search(r"\.ch(\d+)\.", TABLES[name]["renderer"])
    return found.group(1) if found else None


def built_items():
    """The tables.yaml items this profile builds (its outputs under paper_tables/<profile>/)."""
    built = set(result_tables() + params_tables() + analytic_outputs())
    return [name for name in TABLES if set(outputs_of(name)) <= built]


def asked(key, example):
    if key not in config:
        raise ValueError(f"name the {key} with --config {key}={example} (before --configfile)")
    return str(config[key])


def table_target(wildcards):
    name = asked("table", "table_4_1")
    if name not in built_items():
        raise ValueError(f"--config table={name}: profile {PROFILE} ({PARAMS_FILE}) builds no such table or figure; "
                         f"it builds {', '.join(built_items())}")
    return outputs_of(name)


def chapter_target(wildcards):
    chapter = asked("chapter", "4")
    names = [name for name in built_items() if chapter_of(name) == chapter]
    if not names:
        chapters = sorted({c for c in map(chapter_of, built_items()) if c})
        raise ValueError(f"--config chapter={chapter}: profile {PROFILE} ({PARAMS_FILE}) builds no table or figure of "
                         f"that chapter; it builds chapters {', '.join(chapters)}")
    return [path for name in names for path in outputs_of(name)]


def model_target(wildcards):
    run_id = asked("run", "ch3_encoder-mhe_mul")
    if run_id not in RUNS:
        raise ValueError(f"--config run={run_id}: profile {PROFILE} ({PARAMS_FILE}) has no such run; "
                         "`leanlm validate --params ...` lists its runs")
    return [model_of(RUNS[run_id])] + [f"results/{PROFILE}/runs/{run_id}/{family}.json"
                                       for family in RUNS[run_id].finetune]


rule table:
    input:
        table_target,


rule chapter:
    input:
        chapter_target,


rule model:
    input:
        model_target,
