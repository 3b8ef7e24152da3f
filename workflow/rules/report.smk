# Aggregation (per experiment), table rendering, analytic tables/figures and the compiled PDF.
#
# params/tables.yaml lists every output (TABLES, loaded by the Snakefile): kind results (from runs),
# params (from the profile's params file alone) and analytic (counting at the thesis's scale).


def template_of(name):
    """The template a table renders with: tables.yaml's `template`, else <name>.tex.j2."""
    return f"workflow/templates/{TABLES[name].get('template', name + '.tex.j2')}"


def extra_inputs(name):
    """Files besides results and template that the output depends on (tables.yaml `inputs`)."""
    return [p for p in TABLES[name].get("inputs", []) if Path(p).exists()]


def reported_of(name):
    return [p for p in [f"params/reported/{name}.csv"] if Path(p).exists()]


def names_of(kind, *outputs):
    names = [n for n, s in TABLES.items() if s["kind"] == kind and (not outputs or s["outputs"] == list(outputs))]
    return "|".join(sorted(names, key=len, reverse=True)) or "NONE"


def params_tables():
    """Hyperparameter tables of this profile (kind params): rendered from the params file only."""
    return [path for name, spec in TABLES.items() if spec["kind"] == "params" for path in outputs_of(name)]


def lm_eval_baselines():
    """Ch. 4's Rnd. Guess / Majority rows of every run with lm_eval results (the claims read them)."""
    if any("lm_eval" in run.finetune for run in RUNS.values()):
        return [f"results/{PROFILE}/baselines/lm_eval.json"]
    return []


def experiment_baselines(experiments):
    """The same rows, from each of ``experiments``' own lm_eval runs (what a ch. 4 table reads)."""
    return [f"results/{PROFILE}/baselines/{e}/lm_eval.json" for e in experiments
            if any("lm_eval" in run.finetune for run in RUNS.values() if run.experiment == e)]


def experiment_results(experiment):
    """The fine-tuning results of one experiment's runs: what its piece of the aggregate is made of."""
    return [f"results/{PROFILE}/runs/{run_id}/{family}.json"
            for run_id, run in RUNS.items() if run.experiment == experiment for family in run.finetune]


def piece_of(experiment):
    return f"results/{PROFILE}/experiments/{experiment}.csv"


def table_inputs(name):
    """The aggregated results a results table or figure reads: the pieces of its experiments
    (tables.yaml's `experiments` and `optional` that this profile runs), for ch. 4's the lm_eval
    baselines, and for those reading `speed` (Table 2.3) the pretraining speed record. So
    `snakemake paper_tables/<profile>/<table>.tex` runs only that table's runs."""
    spec = TABLES[name]
    experiments = [e for e in dict.fromkeys(spec["experiments"] + spec.get("optional", [])) if e in CFG["experiments"]]
    speed = speed_outputs() if "speed" in spec.get("reads", []) else []
    return [piece_of(e) for e in experiments] + experiment_baselines(experiments) + speed


# Aggregation, one job per experiment: results/<profile>/experiments/<experiment>.csv from its runs' results
# (leanlm.reporting.aggregate). A table, figure or chapter waits for its own experiments only.
rule aggregate:
    input:
        lambda w: experiment_results(w.experiment),
    output:
        "results/{profile}/experiments/{experiment}.csv",
    wildcard_constraints:
        experiment="|".join(sorted(CFG["experiments"], key=len, reverse=True)) or "NONE",
    params:
        code=code_of("leanlm.reporting.aggregate"),
    log:
        "logs/{profile}/aggregate/{experiment}.log",
    shell:
        "leanlm aggregate {P} --experiment {wildcards.experiment:q} > {log:q} 2>&1"


# The whole profile's tidy table (the claims stage and anyone reading every run), put together from the
# pieces, with the results on disk of experiments this run leaves out (a subset keeps and reports them).
rule all_runs:
    input:
        [piece_of(e) for e in CFG["experiments"]],
    output:
        f"results/{PROFILE}/all_runs.csv",
    params:
        code=code_of("leanlm.reporting.aggregate"),
    log:
        f"logs/{PROFILE}/all_runs.log",
    shell:
        "leanlm aggregate {P} --combine > {log:q} 2>&1"


rule experiment_baselines:
    input:
        lambda w: [p for p in experiment_results(w.experiment) if p.endswith("/lm_eval.json")],
    output:
        "results/{profile}/baselines/{experiment}/lm_eval.json",
    wildcard_constraints:
        experiment="|".join(sorted(CFG["experiments"], key=len, reverse=True)) or "NONE",
    params:
        code=code_of("leanlm.lm_eval.baselines"),
    log:
        "logs/{profile}/experiment_baselines/{experiment}.log",
    shell:
        "leanlm aggregate {P} --baselines --experiment {wildcards.experiment:q} > {log:q} 2>&1"


if lm_eval_baselines():

    rule lm_eval_baselines:
        input:
            [path for path in family_results() if path.endswith("/lm_eval.json")],
        output:
            lm_eval_baselines(),
        params:
            code=code_of("leanlm.lm_eval.baselines"),
        log:
            f"logs/{PROFILE}/lm_eval_baselines.log",
        shell:
            "leanlm aggregate {P} --baselines > {log:q} 2>&1"


rule render_table:
    input:
        results=lambda w: table_inputs(w.table),
        template=lambda w: template_of(w.table),
        reported="params/reported/{table}.csv",
        extra=lambda w: extra_inputs(w.table),
    output:
        tex="paper_tables/{profile}/{table}.tex",
        csv=report("paper_tables/{profile}/{table}.csv", caption="../report/table.rst", subcategory="Tables",
                   category=lambda w: report_category_of(w.table), labels=lambda w: report_labels_of(w, w.table, "table")),
    wildcard_constraints:
        table=names_of("results", "tex", "csv"),
    params:
        experiments=lambda w: {
            e: CFG["_matrix"][e]
            for e in TABLES[w.table]["experiments"] + TABLES[w.table].get("optional", [])
            if e in CFG["_matrix"]
        },
        seeds=CFG["seeds"],
        tasks=lambda w: {f: s["tasks"] for f, s in CFG["finetune"].items()},
        scale=CFG["models"],
        # the code this table runs: the rendering machinery and its renderer (tables.yaml), with their imports
        code=lambda w: render_code(TABLES[w.table]),
    log:
        "logs/{profile}/render_table/{table}.log",
    shell:
        "leanlm render {P} --table {wildcards.table:q} > {log:q} 2>&1"


# Figures drawn from runs (ch. 4: indicators, logits, layouts, sizes, loss curves). Their per-run
# inputs (analysis.json: family `analysis`; pretrain.json: written with the model) come with their pieces.
rule render_figure:
    input:
        results=lambda w: table_inputs(w.table),
        reported=lambda w: reported_of(w.table),
    output:
        pdf="paper_tables/{profile}/{table}.pdf",
        png=report("paper_tables/{profile}/{table}.png", caption="../report/figure.rst", subcategory="Figures",
                   category=lambda w: report_category_of(w.table), labels=lambda w: report_labels_of(w, w.table, "figure")),
        csv="paper_tables/{profile}/{table}.csv",
    wildcard_constraints:
        table=names_of("results", "pdf", "png", "csv"),
    params:
        experiments=lambda w: {
            e: CFG["_matrix"][e]
            for e in TABLES[w.table]["experiments"] + TABLES[w.table].get("optional", [])
            if e in CFG["_matrix"]
        },
        tasks=lambda w: {f: s["tasks"] for f, s in CFG["finetune"].items()},
        scale=CFG["models"],
        code=lambda w: render_code(TABLES[w.table]),
    log:
        "logs/{profile}/render_figure/{table}.log",
    shell:
        "leanlm render {P} --table {wildcards.table:q} > {log:q} 2>&1"


# Hyperparameter tables (3.11, 3.12): from the params file alone, so they never wait for training.
rule params_table:
    input:
        template=lambda w: template_of(w.table),
        reported=lambda w: reported_of(w.table),
    output:
        tex="paper_tables/{profile}/{table}.tex",
        csv=report("paper_tables/{profile}/{table}.csv", caption="../report/table.rst", subcategory="Tables",
                   category=lambda w: report_category_of(w.table), labels=lambda w: report_labels_of(w, w.table, "table")),
    wildcard_constraints:
        table=names_of("params"),
    params:
        pretrain=CFG["pretrain"],
        finetune=CFG["finetune"],
        # Tables 2.4/2.5 (and 4.9) show blocks with the profile's variants laid over them.
        variants={k: CFG.get(k, {}) for k in ("pretrain_variants", "finetune_variants")},
        scale=CFG["models"],
        source=CFG["source"],
        code=lambda w: render_code(TABLES[w.table]),
    log:
        "logs/{profile}/params_table/{table}.log",
    shell:
        "leanlm render {P} --table {wildcards.table:q} > {log:q} 2>&1"


# Target for the hyperparameter tables alone: `snakemake hyperparameter_tables`.
rule hyperparameter_tables:
    input:
        params_tables(),


ANALYTIC_PARAMS = dict(code=lambda w: render_code(TABLES[w.item]))


rule analytic_table:
    input:
        reported=lambda w: reported_of(w.item),
        template=lambda w: template_of(w.item),
        extra=lambda w: extra_inputs(w.item),
    output:
        tex="paper_tables/{profile}/{item}.tex",
        csv=report("paper_tables/{profile}/{item}.csv", caption="../report/table.rst", subcategory="Tables",
                   category=lambda w: report_category_of(w.item), labels=lambda w: report_labels_of(w, w.item, "table")),
    wildcard_constraints:
        item=names_of("analytic", "tex", "csv"),
    params:
        **ANALYTIC_PARAMS,
    log:
        "logs/{profile}/analytic_table/{item}.log",
    shell:
        "leanlm analytic {P} --item {wildcards.item:q} > {log:q} 2>&1"


rule analytic_figure:
    input:
        reported=lambda w: reported_of(w.item),
    output:
        pdf="paper_tables/{profile}/{item}.pdf",
        png=report("paper_tables/{profile}/{item}.png", caption="../report/figure.rst", subcategory="Figures",
                   category=lambda w: report_category_of(w.item), labels=lambda w: report_labels_of(w, w.item, "figure")),
        csv="paper_tables/{profile}/{item}.csv",
    wildcard_constraints:
        item=names_of("analytic", "pdf", "png", "csv"),
    params:
        **ANALYTIC_PARAMS,
    log:
        "logs/{profile}/analytic_figure/{item}.log",
    shell:
        "leanlm analytic {P} --item {wildcards.item:q} > {log:q} 2>&1"


def claims_outputs():
    """The claims' verdicts (params/claims.yaml -> paper_tables/<profile>/claims.{csv,md,tex})."""
    return [f"paper_tables/{PROFILE}/claims.{ext}" for ext in ("csv", "md", "tex")]


# Verdicts on the thesis's claims from the runs' per-example results (leanlm.claims), after aggregation.
# The speed claims (§2.5.3) read the pretraining speed record (rule pretraining_speed), not training clocks.
rule claims:
    input:
        results=f"results/{PROFILE}/all_runs.csv",
        runs=family_results(),
        baselines=lm_eval_baselines(),
        speed=speed_outputs(),
        claims="params/claims.yaml",
        schema="workflow/schemas/claims.schema.json",
        template="workflow/templates/claims.tex.j2",
    output:
        claims_outputs(),
    params:
        tasks={f: s["tasks"] for f, s in CFG["finetune"].items()},
        code=code_of("leanlm.claims.report"),  # the claims stage and all it imports
    log:
        f"logs/{PROFILE}/claims.log",
    shell:
        "leanlm claims {P} > {log:q} 2>&1"


# tables.pdf is made of this run's tables and figures (its inputs), not every file in the folder: a subset
# or a shorter experiments list leaves an earlier run's tables there.
rule pdf:
    input:
        template="workflow/templates/document.tex.j2",
        parts=result_tables() + params_tables() + analytic_outputs() + claims_outputs(),
    output:
        report(f"paper_tables/{PROFILE}/tables.pdf", caption="../report/tables_pdf.rst", category="Report"),
    params:
        code=code_of("leanlm.reporting.tables_pdf"),
    log:
        f"logs/{PROFILE}/pdf.log",
    shell:
        "leanlm pdf {P} {input.parts:q} > {log:q} 2>&1"
