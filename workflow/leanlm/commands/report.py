"""The report commands: ``aggregate``, ``render``, ``analytic``, ``pdf``, ``claims``, ``report-page``."""

from __future__ import annotations

from leanlm.commands.common import _config, _params_arg


def cmd_aggregate(args) -> None:
    from leanlm.reporting import aggregate

    config = _config(args)  # each record checked against the profile's settings
    if args.baselines:
        aggregate.collect_baselines(config["profile"], args.experiment)
    elif args.experiment:
        aggregate.write_piece(config["profile"], args.experiment, config)
    elif args.combine:
        aggregate.combine(config["profile"], config)
    else:
        aggregate.main(config["profile"], config)


def cmd_render(args) -> None:
    from leanlm.reporting.render import render_table

    config = _config(args)
    for path in render_table(config["profile"], args.table, config, verify_settings=True):
        print(path)


def cmd_analytic(args) -> None:
    from leanlm.reporting.analytic import main

    main(_config(args)["profile"], args.item)


def cmd_pdf(args) -> None:
    from leanlm.reporting.tables_pdf import build_pdf

    config = _config(args)
    out = build_pdf(config["profile"], parts=args.parts or None, config=config)
    print(out if out else "pdflatex not found: tables.pdf not built (the .tex files are there)")


def cmd_claims(args) -> None:
    from leanlm.claims.report import main

    for path in main(_config(args), draws=args.draws, claims_file=args.claims):
        print(path)


def cmd_report_page(args) -> None:
    from leanlm.reporting.report_page import build_report

    out = build_report(_config(args), parts=args.parts or None)
    print(out)
    if args.screenshot:
        from leanlm.reporting.browser import screenshot

        print(screenshot(out, args.screenshot))


def add_aggregate(sub) -> None:
    p = sub.add_parser("aggregate", help="run metrics -> results/<profile>/experiments/<experiment>.csv, all_runs.csv")
    _params_arg(p)
    # None of them: every step (by hand); Snakemake runs one step per job.
    p.add_argument("--experiment", help="only this experiment's runs -> results/<profile>/experiments/<name>.csv")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--combine", action="store_true",
                      help="only all_runs.csv, from the experiments' pieces (and the other results on disk)")
    what.add_argument("--baselines", action="store_true",
                      help="only ch. 4's Rnd. Guess / Majority rows -> results/<profile>/baselines/lm_eval.json "
                           "(with --experiment: from its runs, into baselines/<experiment>/lm_eval.json)")
    p.set_defaults(func=cmd_aggregate)


def add_render(sub) -> None:
    p = sub.add_parser("render", help="render one thesis table (.tex + .csv) from the aggregated results")
    _params_arg(p)
    p.add_argument("--table", required=True, help="e.g. table_3_1")
    p.set_defaults(func=cmd_render)


def add_analytic(sub) -> None:
    p = sub.add_parser("analytic", help="tables and figures that need no training (parameter counts, memory)")
    _params_arg(p)
    p.add_argument("--item", default=None, help="one item (e.g. table_3_13); default: all")
    p.set_defaults(func=cmd_analytic)


def add_pdf(sub) -> None:
    p = sub.add_parser("pdf", help="compile paper_tables/<profile>/tables.pdf (needs pdflatex)")
    _params_arg(p)
    p.add_argument("parts", nargs="*", metavar="FILE",
                   help="only these tables (.tex) and figures (.pdf) of paper_tables/<profile>/, other files "
                        "ignored (the pipeline passes its run's); default: every one in that folder")
    p.set_defaults(func=cmd_pdf)


def add_claims(sub) -> None:
    p = sub.add_parser("claims", help="the thesis's claims as verdicts with 95%% intervals -> paper_tables/<profile>/claims.*")
    _params_arg(p)
    p.add_argument("--claims", default=None, metavar="FILE", help="claims file (default: params/claims.yaml)")
    p.add_argument("--draws", type=int, default=2000, help="bootstrap draws per comparison (default: 2000)")
    p.set_defaults(func=cmd_claims)


def add_report_page(sub) -> None:
    p = sub.add_parser("report-page", help="paper_tables/<profile>/report.html: the run's claims, tables and figures "
                       "as one page that opens from disk (docs/report.md)")
    _params_arg(p)
    p.add_argument("parts", nargs="*", metavar="FILE", help="only these outputs of paper_tables/<profile>/ (the "
                   "pipeline passes its run's); default: every one in that folder")
    p.add_argument("--screenshot", default=None, metavar="PNG", help="also save a PNG of the page's first screen "
                   "(headless Chromium, as the browser test opens it)")
    p.set_defaults(func=cmd_report_page)
