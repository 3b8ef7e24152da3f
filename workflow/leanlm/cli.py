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


def _params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--params",
        default=None,
        metavar="FILE",
        help="profile to use (default: params/smoke.yaml)",
    )
    p.add_argument(
        "--subset",
        default=None,
        metavar="NAME",
        help="only the experiments (and, where it says so, fine-tuning families) of the profile's subset NAME "
        "(key subsets), e.g. cpu in params/signal.yaml",
    )


def _config(args):
    from leanlm.config import load_config
    from leanlm.data.plumbing.mirror import configure_mirror

    config = load_config(args.params, subset=getattr(args, "subset", None))
    configure_mirror(config)  # data.hub_mirror: where the hub source reads when the hub is out of reach
    return config


def cmd_validate(args) -> None:
    from leanlm.runs import runs

    from leanlm import paths
    from leanlm.data.plumbing.dvc_profiles import check_dvc_profile

    from leanlm.reporting.params_tables import check_params_tables
    from leanlm.reporting.tables_file import load_tables

    config = _config(args)
    check_dvc_profile(config, paths.project_root() / "dvc.yaml")  # as the Snakefile does: DVC has its stages
    load_tables()  # params/tables.yaml, as the Snakefile reads it: renderers inside leanlm.reporting
    check_params_tables(config)  # the hyperparameter tables render from this profile
    # Runs that would not fit the GPU memory the profile declares (resources.pretrain.gpu_memory_gb): logged
    # warnings, not errors (an estimate, docs/memory.md); measured only for a profile that declares it.
    from leanlm.budget import run_memories
    from leanlm.memory import check_gpu_memory

    check_gpu_memory(config, run_memories)
    print(f"{config['_params_file']}: valid; profile {config['profile']!r}, source {config['source']!r}")
    for run in runs(config):
        print(f"  {run.run_id}: {run.backbone} {run.attention}, pretrain {run.objective}, fine-tune {', '.join(run.finetune)}")


def cmd_data(args) -> None:
    if args.stage == "register":  # DVC defines the profile's stages from now on (leanlm.data.plumbing.dvc_profiles)
        from leanlm import paths
        from leanlm.data.plumbing.dvc_profiles import register

        config = _config(args)
        if register(config, paths.project_root() / "dvc.yaml"):
            print(f"leanlm: DVC now defines the data stages of profile {config['profile']!r} (dvc_stages.yaml)")
        return
    from leanlm.data.plumbing.stages import run_stage

    run_stage(args.stage, _config(args), args.family)


def cmd_pretrain(args) -> None:
    from leanlm.stages.pretrain import pretrain

    pretrain(_config(args), args.run, keep_checkpoint=args.keep_checkpoint)


def cmd_finetune(args) -> None:
    from leanlm import paths
    from leanlm.runs import get_run
    from leanlm.snakemake_records import remove_recorded_checkpoint
    from leanlm.stages.finetune import finetune

    config = _config(args)
    run = get_run(config, args.run)
    if args.family in run.finetune:  # else finetune says what is wrong
        # The pretraining this job reads is finished and recorded by Snakemake (it starts no fine-tuning before):
        # its kept training checkpoint goes now rather than at the end of the workflow. Snakemake's records are
        # the workflow's business, so this is the command's step, not the library's (leanlm.snakemake_records).
        trained = run.evaluate_from or args.run
        if remove_recorded_checkpoint(paths.project_root(), config["profile"], trained):
            logging.getLogger(__name__).info("%s: removed the training checkpoint of the finished pretraining", trained)
    finetune(config, args.run, args.family)


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


def cmd_bench(args) -> None:
    from leanlm.benchmarks.pretraining import BENCH_CONFIGS, format_report, run_bench
    from leanlm.errors import ConfigError

    if args.parity is not None:
        return _bench_parity(args)
    chosen = {}
    if args.config is not None:
        if args.config not in BENCH_CONFIGS:
            raise ConfigError(f"--config {args.config!r} is unknown; one of {', '.join(BENCH_CONFIGS)}")
        chosen = dict(BENCH_CONFIGS[args.config])
    if args.run is not None:
        chosen.update(run=args.run, params=args.params or "params/paper.yaml")
    elif args.params is not None:
        raise ConfigError("--params names the profile of --run; give --run too (or --config)")
    # Flags given on the command line win over the named configuration's batch and length.
    for key, default in (("batch_size", 8), ("seq_len", 512)):
        value = getattr(args, key)
        chosen[key] = value if value is not None else chosen.get(key, default)
    report = run_bench(
        size=args.size,
        attention=args.attention,
        steps=args.steps,
        warmup=args.warmup,
        device=args.device,
        dtype=args.dtype,
        compile=args.compile,
        prefetch=args.prefetch,
        build_only=args.build_only,
        **chosen,
    )
    print(format_report(report))
    if args.out:
        from leanlm.io import write_json

        write_json(args.out, report)


def _bench_parity(args) -> None:
    from leanlm.benchmarks.parity import format_parity, run_parity

    report = run_parity(args.parity, steps=args.steps, warmup=args.warmup, device=args.device,
                        batch_size=args.batch_size, seq_len=args.seq_len, memory=not args.no_memory)
    print(format_parity(report))
    if args.out:
        from leanlm.io import write_json

        write_json(args.out, report)


def cmd_budget(args) -> None:
    from leanlm import budget as budget_mod
    from leanlm import memory
    from leanlm.benchmarks.pretraining import PEAK_BF16_FLOPS, peak_flops

    peak = peak_flops(args.gpu)
    if peak is None:
        from leanlm.errors import ConfigError

        raise ConfigError(f"--gpu {args.gpu!r}: no bf16 peak known; one of {[name for name, _ in PEAK_BF16_FLOPS]}")
    config = _config(args)
    result = budget_mod.budget(config, tokens_per_example=args.finetune_tokens)
    mfu = budget_mod.check_fraction(args.mfu)
    gpu_gb = memory.gpu_memory_gb(args.gpu)
    if gpu_gb is None:
        from leanlm.errors import ConfigError

        raise ConfigError(f"--gpu {args.gpu!r}: its memory is unknown; one of {[n for n, _ in memory.GPU_MEMORY_GB]}")
    print(budget_mod.report(result, peak, mfu, args.gpu), end="")
    memories = budget_mod.run_memories(config)  # every run with and without activation checkpointing
    print("\n" + memory.memory_table(memories, args.gpu), end="")
    if args.out:
        from leanlm.io import write_text

        write_text(args.out, budget_mod.to_json(result, memories))


def cmd_gpu_check(args) -> None:
    from pathlib import Path

    from leanlm.errors import ConfigError

    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch starts: the engine trains on any GPU it sees
    import torch

    from leanlm.benchmarks.gpucheck.check import budget_for, parse_sections, run_check

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device cuda: torch {torch.__version__} sees no CUDA device here; use --device cpu "
                          f"(with --tiny, what CI runs)")
    budget_s = budget_for(args.tiny, args.budget_s)
    if budget_s <= 0:
        raise ConfigError(f"--budget-s must be > 0, got {budget_s}")
    try:
        sections = parse_sections(args.sections)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    run_check(Path(args.out), args.device, args.tiny, budget_s, sections,
              Path(args.bundle) if args.bundle else None, sys.argv[1:])


def cmd_gpu_bundle(args) -> None:
    from pathlib import Path

    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the reference is a CPU fp32 one, on any machine
    from leanlm.benchmarks.gpucheck.bundle import build_bundle, report

    record = build_bundle(Path(args.out), tiny=args.tiny, wheels=not args.no_wheels)
    print(report(record, Path(args.out)))


def cmd_mirror(args) -> None:
    from leanlm.data.plumbing.mirror_fill import fill_mirror

    record = fill_mirror(_config(args), args.out)
    for kind, items in record["items"].items():
        print(f"{kind}: {len(items)}" + "".join(f"\n  {item}" for item in items))
    print(f"mirror size: {record['bytes'] / 2**30:.2f} GiB ({record['bytes']:,} bytes)")


def cmd_fixtures(args) -> None:
    from leanlm.data import fixtures

    config = _config(args)
    if not config["data"].get("hub_fixtures"):
        from leanlm.errors import ConfigError

        raise ConfigError(f"{config['_params_file']}: key {fixtures.SETTING} is not true; only a profile that reads "
                          f"its hub mirror from fixtures (params/rehearsal.yaml) is built this way")
    record = fixtures.build_fixture_mirror(config, args.out or config["data"]["hub_mirror"])
    for kind, items in record["items"].items():
        print(f"{kind}: {len(items)}" + "".join(f"\n  {item}" for item in items))
    print(f"fixture mirror size: {record['bytes'] / 2**20:.1f} MiB ({record['bytes']:,} bytes)")


def cmd_export_hf(args) -> None:
    from leanlm.export import export_hf

    export_hf(args.checkpoint, args.out)
    print(args.out)


def cmd_share(args) -> None:
    from leanlm import share
    from leanlm.paths import project_root

    root, config = project_root(), _config(args)
    profile = config["profile"]
    if args.action == "push":
        added = share.push(root, config, args.remote)
        print("pushed; commit these with dvc.lock and dvc_stages.yaml: " + " ".join(added))
    else:
        print(f"pulled; {share.pull(root, profile, args.remote)} outputs carry their Snakemake records again")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leanlm", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<stage>")

    p = sub.add_parser("validate", help="validate a profile and list its runs")
    _params_arg(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("data", help="one data stage (run by Snakemake's data rules, and by `dvc repro`)")
    # corpora / tokenizers: a profile's named pretraining data (data.corpora, data.tokenizers; paper: SlimPajama,
    # Pythia's and RoBERTa's BPE), DVC's stages corpora@ / tokenizers@.
    # register: enter the profile in dvc_stages.yaml, so that DVC defines its stages (`leanlm share push` runs it).
    p.add_argument("stage", choices=["fetch", "corpus", "tokenizer", "tasks", "corpora", "tokenizers", "register"])
    # Snakemake's data_tasks_<set> rules build one task set each (leanlm.data.plumbing.stages.task_sets)
    p.add_argument("--family", nargs="+", default=None, help="tasks stage: only these families' task sets; "
                   "without it, every family's")
    _params_arg(p)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("pretrain", help="pretrain one model of the experiment matrix")
    _params_arg(p)
    p.add_argument("--run", required=True, help="run id, e.g. ch3_encoder-mhe_mul (see `leanlm validate`)")
    p.add_argument("--keep-checkpoint", action="store_true",
                   help="leave the final training checkpoint in the run folder (the pipeline deletes it once "
                        "Snakemake has recorded the outputs); by default it is deleted once the model is written")
    p.set_defaults(func=cmd_pretrain)

    p = sub.add_parser("finetune", help="fine-tune and evaluate one model on one task family, all seeds")
    _params_arg(p)
    p.add_argument("--run", required=True)
    p.add_argument("--family", required=True, help="task family, e.g. glue")
    p.set_defaults(func=cmd_finetune)

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

    p = sub.add_parser("render", help="render one thesis table (.tex + .csv) from the aggregated results")
    _params_arg(p)
    p.add_argument("--table", required=True, help="e.g. table_3_1")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("analytic", help="tables and figures that need no training (parameter counts, memory)")
    _params_arg(p)
    p.add_argument("--item", default=None, help="one item (e.g. table_3_13); default: all")
    p.set_defaults(func=cmd_analytic)

    p = sub.add_parser("pdf", help="compile paper_tables/<profile>/tables.pdf (needs pdflatex)")
    _params_arg(p)
    p.add_argument("parts", nargs="*", metavar="FILE",
                   help="only these tables (.tex) and figures (.pdf) of paper_tables/<profile>/, other files "
                        "ignored (the pipeline passes its run's); default: every one in that folder")
    p.set_defaults(func=cmd_pdf)

    p = sub.add_parser("claims", help="the thesis's claims as verdicts with 95%% intervals -> paper_tables/<profile>/claims.*")
    _params_arg(p)
    p.add_argument("--claims", default=None, metavar="FILE", help="claims file (default: params/claims.yaml)")
    p.add_argument("--draws", type=int, default=2000, help="bootstrap draws per comparison (default: 2000)")
    p.set_defaults(func=cmd_claims)

    p = sub.add_parser("report-page", help="paper_tables/<profile>/report.html: the run's claims, tables and figures "
                       "as one page that opens from disk (docs/report.md)")
    _params_arg(p)
    p.add_argument("parts", nargs="*", metavar="FILE", help="only these outputs of paper_tables/<profile>/ (the "
                   "pipeline passes its run's); default: every one in that folder")
    p.add_argument("--screenshot", default=None, metavar="PNG", help="also save a PNG of the page's first screen "
                   "(headless Chromium, as the browser test opens it)")
    p.set_defaults(func=cmd_report_page)

    p = sub.add_parser("bench", help="pretraining throughput: batch build and step time, tokens/s, peak memory, "
                                     "MFU on GPU")
    p.add_argument("--config", default=None,
                   help="a named configuration: bert_base_mha, bert_base_mhe_mul (32 x 512), ch4_standard_500m, "
                        "ch4_approximate_500m (8 x 2048); see leanlm.benchmarks.pretraining.BENCH_CONFIGS")
    p.add_argument("--run", default=None, help="bench this run of --params (its model, objective, vocabulary)")
    p.add_argument("--params", default=None, metavar="FILE", help="the profile of --run (default: params/paper.yaml)")
    p.add_argument("--size", default="base", help="without --run/--config: BERT preset size, e.g. base or tiny")
    p.add_argument("--attention", default="mha", help="without --run/--config: attention variant, e.g. mha, mhe_mul")
    p.add_argument("--batch-size", type=int, default=None, help="default: the configuration's, else 8")
    p.add_argument("--seq-len", type=int, default=None, help="default: the configuration's, else 512")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (as pretrain's compile: true)")
    p.add_argument("--prefetch", type=int, default=2,
                   help="micro-batches built ahead in the timed loop (default 2; 0: inline)")
    p.add_argument("--build-only", action="store_true",
                   help="time the batch building alone (no model; the host's share at any size)")
    p.add_argument("--parity", default=None, choices=["decoder", "bert", "all"],
                   help="instead: our backbone against its transformers twin at an equal config, interleaved "
                        "in this process (--steps rounds after --warmup; leanlm.benchmarks.parity)")
    p.add_argument("--no-memory", action="store_true", help="with --parity: skip the peak-memory processes")
    p.add_argument("--out", default=None, help="also write the report as JSON here")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("budget", help="GPU-hours per chapter, disk and each run's peak GPU memory of a profile, "
                                      "computed from its runs")
    _params_arg(p)
    p.add_argument("--gpu", default="H100", help="GPU whose bf16 dense peak sets the hours and whose memory the "
                                                 "runs must fit (default H100 SXM, 80 GB)")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation assumed (default 0.4)")
    p.add_argument("--finetune-tokens", type=int, default=128,
                   help="mean tokens per fine-tuning example (batches pad to the longest in the batch)")
    p.add_argument("--out", default=None, help="also write the per-run numbers as JSON here")
    p.set_defaults(func=cmd_budget)


    p = sub.add_parser("gpu-check", help="the GPU check (docs/gpu-check.md): environment and SDPA kernels, BERT-base "
                                         "and ch. 4 throughput and MFU, leanlm vs transformers, the pipeline's "
                                         "commands; every sub-step recorded in OUT/gpu_check.json")
    p.add_argument("--out", required=True, help="folder for gpu_check.json (and pipeline.log)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where to run (default cuda)")
    p.add_argument("--tiny", action="store_true",
                   help="every section at tiny sizes (what CI runs with --device cpu); without --bundle a tiny "
                        "bundle is made first")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds for the whole check, shared by the sections (default 480: about eight minutes "
                        "on an H100, compile included; with --tiny 3600, since the tiny run checks that every "
                        "path works, not how fast); a sub-step that would not fit is recorded as skipped")
    p.add_argument("--bundle", default=None, help="the folder `make gpu-bundle` made (default: none; sections 4 and "
                                                  "5 need one, except with --tiny)")
    p.add_argument("--sections", default=None,
                   help="only these sections, e.g. 1,4 or environment,correctness (default: all five)")
    p.set_defaults(func=cmd_gpu_check)

    p = sub.add_parser("gpu-bundle", help="prepare what travels to the GPU machine (make gpu-bundle): data, CPU "
                                          "fp32 reference, wheels; prints its size and the device command")
    p.add_argument("--out", default=".gpu-bundle", help="bundle folder, replaced whole (default .gpu-bundle)")
    p.add_argument("--tiny", action="store_true", help="a tiny bundle, for `gpu-check --tiny --bundle`")
    p.add_argument("--no-wheels", action="store_true", help="leave out the wheels (a bundle for this machine)")
    p.set_defaults(func=cmd_gpu_bundle)

    p = sub.add_parser("mirror", help="fill the hub mirror (data.hub_mirror) with what the profile reads from the "
                                      "hub, on a machine with network, and report its size")
    _params_arg(p)
    p.add_argument("--out", default=None, help="mirror directory (default: data.hub_mirror or $LEANLM_HUB_MIRROR)")
    p.set_defaults(func=cmd_mirror)

    p = sub.add_parser("fixtures", help="write the hub mirror of a profile with data.hub_fixtures (the rehearsal) from "
                                        "generated fixtures in the hub's schemas (leanlm.data.fixtures)")
    _params_arg(p)
    p.add_argument("--out", default=None, help="mirror directory (default: the profile's data.hub_mirror)")
    p.set_defaults(func=cmd_fixtures)

    p = sub.add_parser("share", help="push a profile's data, models and results to a DVC remote (with Snakemake's "
                                      "records of them), or pull them into a clone")
    p.add_argument("action", choices=["push", "pull"])
    _params_arg(p)
    p.add_argument("--remote", default=None, help="DVC remote name (default: the default remote)")
    p.set_defaults(func=cmd_share)

    p = sub.add_parser("export-hf", help="export a checkpoint in a Hugging Face compatible layout")
    p.add_argument("checkpoint", help="models/<profile>/<run_id>")
    p.add_argument("out", help="output directory")
    p.set_defaults(func=cmd_export_hf)
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
