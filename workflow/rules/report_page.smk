# The pipeline's last rule: paper_tables/<profile>/report.html, the run's claims, tables and figures as one
# page that opens from disk (leanlm.reporting.report_page, docs/report.md). Made of the same outputs as
# tables.pdf, and after it, so it links the PDF.
#
# Also the categories and labels of the outputs report.smk marks with report() for `snakemake --report`
# (one category per chapter; labels: the thesis's number and the caption). Snakemake evaluates them when it
# writes its report, after the outputs exist; imported then, so reading the Snakefile stays light.


def report_category_of(name):
    from leanlm.reporting.report_page import report_category

    return report_category(name)


def report_labels_of(wildcards, name, kind):
    from leanlm.reporting.report_page import report_labels

    return report_labels(wildcards.profile, name, kind)


def report_page_target():
    return [f"paper_tables/{PROFILE}/report.html"]


localrules:
    report_page,


rule report_page:
    input:
        template="workflow/templates/report.html.j2",
        parts=result_tables() + params_tables() + analytic_outputs() + claims_outputs(),
        pdf=pdf_target(),
    output:
        report(report_page_target()[0], caption="../report/report_page.rst", category="Report"),
    params:
        code=code_of("leanlm.reporting.report_page"),
    log:
        f"logs/{PROFILE}/report_page.log",
    shell:
        "leanlm report-page {P} {input.parts:q} > {log:q} 2>&1"
