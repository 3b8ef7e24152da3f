"""``leanlm <stage> ...``: what every Snakemake rule runs, and what a person can run by hand.

Every stage reads the whole profile (``--params params/<profile>.yaml``, default params/smoke.yaml),
validates it, and does one job. Mistakes a person can fix (:class:`leanlm.errors.LeanLMError`) are
printed as one clear message with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from leanlm.errors import LeanLMError
from leanlm.process_end import end_process, exit_code, under_torchrun


def build_parser() -> argparse.ArgumentParser:
    from leanlm.commands import bench, data, report, share, train

    parser = argparse.ArgumentParser(prog="leanlm", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<stage>")
    # The subcommands in the order --help lists them (each group's module: leanlm.commands).
    for add in (data.add_validate, data.add_data, train.add_pretrain, train.add_finetune, report.add_aggregate,
                report.add_render, report.add_analytic, report.add_pdf, report.add_claims, report.add_report_page,
                bench.add_bench, bench.add_budget, bench.add_gpu_check, bench.add_gpu_bundle, data.add_mirror,
                data.add_fixtures, share.add_share, train.add_export_hf):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None and "WORLD_SIZE" not in os.environ:
        # A local Snakemake run keeps a warm leanlm (leanlm.forkserver): hand the job to it if there is one.
        # Not under torchrun (WORLD_SIZE set): each process must be the rank torchrun started.
        from leanlm.forkserver import delegate

        code = delegate(sys.argv[1:])
        if code is not None:
            return code
    args = build_parser().parse_args(argv)
    # Under torchrun only rank 0 logs progress; the other ranks say only what goes wrong.
    quiet = os.environ.get("RANK", "0") != "0"
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if argv is not None or not under_torchrun():  # in-process callers (tests, the fork server) get exceptions
        return _run(args)
    try:
        code = _run(args)
    except BaseException as exc:  # reported as the interpreter would, before end_process skips it
        code = exit_code(exc)
    end_process(code)  # one of torchrun's processes: no interpreter finalization (see leanlm.process_end)


def _run(args: argparse.Namespace) -> int:
    try:
        args.func(args)
    except LeanLMError as exc:
        print(f"leanlm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
