# Aggregation, table rendering, analytic tables/figures and the compiled PDF.


rule aggregate:
    input:
        family_results(),
    output:
        f"results/{PROFILE}/all_runs.csv",
    params:
        code=code_version("reporting/aggregate"),
    shell:
        "leanlm aggregate {P}"


rule render_table:
    input:
        results=f"results/{PROFILE}/all_runs.csv",
        template="workflow/templates/{table}.tex.j2",
        reported="params/reported/{table}.csv",
    output:
        tex="paper_tables/{profile}/{table}.tex",
        csv="paper_tables/{profile}/{table}.csv",
    wildcard_constraints:
        table="|".join(n for n, s in TABLES.items() if s["kind"] == "results"),
    params:
        experiments=lambda w: {e: CFG["_matrix"][e] for e in TABLES[w.table]["experiments"]},
        scale=CFG["models"],
        code=code_version("reporting/render", "reporting/derived", "reporting/reported", "reporting/latex"),
    shell:
        "leanlm render {P} --table {wildcards.table}"


def analytic_names(*outputs):
    return "|".join(n for n, s in TABLES.items() if s["kind"] == "analytic" and s["outputs"] == list(outputs))


ANALYTIC_PARAMS = dict(
    code=code_version("modeling", "reporting/analytic", "reporting/figures", "reporting/render", "reporting/latex", "reporting/reported")
)


rule analytic_table:
    input:
        reported=lambda w: [p for p in [f"params/reported/{w.item}.csv"] if Path(p).exists()],
        template="workflow/templates/{item}.tex.j2",
    output:
        tex="paper_tables/{profile}/{item}.tex",
        csv="paper_tables/{profile}/{item}.csv",
    wildcard_constraints:
        item=analytic_names("tex", "csv"),
    params:
        **ANALYTIC_PARAMS,
    shell:
        "leanlm analytic {P} --item {wildcards.item}"


rule analytic_figure:
    input:
        reported=lambda w: [p for p in [f"params/reported/{w.item}.csv"] if Path(p).exists()],
    output:
        pdf="paper_tables/{profile}/{item}.pdf",
        png="paper_tables/{profile}/{item}.png",
        csv="paper_tables/{profile}/{item}.csv",
    wildcard_constraints:
        item=analytic_names("pdf", "png", "csv"),
    params:
        **ANALYTIC_PARAMS,
    shell:
        "leanlm analytic {P} --item {wildcards.item}"


rule pdf:
    input:
        "workflow/templates/document.tex.j2",
        result_tables(),
        analytic_outputs(),
    output:
        f"paper_tables/{PROFILE}/tables.pdf",
    params:
        code=code_version("reporting/latex"),
    shell:
        "leanlm pdf {P}"
