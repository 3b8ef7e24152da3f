# Aggregation, table rendering, analytic tables/figures and the compiled PDF.
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
    """Ch. 4's Rnd. Guess / Majority rows, which aggregation writes when any run has lm_eval results."""
    if any("lm_eval" in run.finetune for run in RUNS.values()):
        return [f"results/{PROFILE}/baselines/lm_eval.json"]
    return []


rule aggregate:
    input:
        family_results(),
    output:
        f"results/{PROFILE}/all_runs.csv",
        lm_eval_baselines(),
    params:
        code=code_of("leanlm.reporting.aggregate"),
    log:
        f"logs/{PROFILE}/aggregate.log",
    shell:
        "leanlm aggregate {P} > {log:q} 2>&1"


rule render_table:
    input:
        results=f"results/{PROFILE}/all_runs.csv",
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
# inputs (analysis.json: family `analysis`; pretrain.json: written with the model) come with all_runs.csv.
rule render_figure:
    input:
        results=f"results/{PROFILE}/all_runs.csv",
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
# The runs' pretrain.json (step times, Table 2.3's claim) come with their models, which the results need.
rule claims:
    input:
        results=f"results/{PROFILE}/all_runs.csv",
        runs=family_results(),
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
