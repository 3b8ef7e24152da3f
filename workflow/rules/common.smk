# Helpers shared by the rule files: which outputs a profile produces.

import shlex

# Every value a rule's shell command interpolates is shell-quoted: this path (`--configfile` may name any
# file, spaces or `$(...)` included) here, the wildcards and PROFILE with Snakemake's `:q` in the rules.
P = f"--params {shlex.quote(str(PARAMS_FILE))}" + (f" --subset {shlex.quote(SUBSET)}" if SUBSET else "")


def run_dir(run_id):
    return f"models/{PROFILE}/{run_id}"


def trained_run(run_id):
    """The run whose trained model ``run_id`` uses: itself, or the one it evaluates (ch. 4 skip)."""
    return RUNS[run_id].evaluate_from or run_id


def model_of(wildcards):
    return f"models/{PROFILE}/{trained_run(wildcards.run_id)}/model.safetensors"


def family_results():
    return [
        f"results/{PROFILE}/runs/{run_id}/{family}.json"
        for run_id, run in RUNS.items()
        for family in run.finetune
    ]


def outputs_of(name):
    return [f"paper_tables/{PROFILE}/{name}.{ext}" for ext in TABLES[name]["outputs"]]


def result_tables():
    """Tables rendered from runs whose experiments this profile runs (and, for a table that reads only some
    fine-tuning families, `families:` in tables.yaml, runs with one of them: a subset may leave some out)."""
    def runs_families(spec):
        wanted = set(spec.get("families") or [])
        return not wanted or all(wanted & set(CFG["_matrix"][e]["finetune"]) for e in spec["experiments"])

    return [
        path
        for name, spec in TABLES.items()
        if spec["kind"] == "results" and set(spec["experiments"]) <= set(CFG["experiments"]) and runs_families(spec)
        for path in outputs_of(name)
    ]


def analytic_outputs():
    return [path for name, spec in TABLES.items() if spec["kind"] == "analytic" for path in outputs_of(name)]


def pdf_target():
    # tables.pdf needs pdflatex (Debian: texlive-latex-recommended; `make setup` installs it).
    if shutil.which("pdflatex"):
        return [f"paper_tables/{PROFILE}/tables.pdf"]
    print("leanlm: pdflatex not found, tables.pdf is skipped (the .tex tables are still rendered)", file=sys.stderr)
    return []
