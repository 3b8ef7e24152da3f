"""The measuring commands: ``bench`` (throughput, parity), ``budget``, ``gpu-check``, ``gpu-bundle``."""

from __future__ import annotations

import os
import sys

from leanlm.commands.common import _config, _params_arg


def cmd_bench(args) -> None:
    from leanlm.benchmarks.pretraining import BENCH_CONFIGS, format_report, run_bench
    from leanlm.errors import ConfigError

    if args.parity is not None:
        return _bench_parity(args)
    if args.speed:
        return _bench_speed(args)
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
        profile_steps=args.profile_steps,
        **chosen,
    )
    print(format_report(report))
    if args.out:
        from leanlm.io import write_json

        write_json(args.out, report)


def _bench_speed(args) -> None:
    from leanlm.benchmarks.objective_speed import format_speed, measure
    from leanlm.io import write_json
    from leanlm.reporting.pretraining_speed import speed_path

    config = _config(args)
    record = measure(config, device=args.device)
    print(format_speed(record))
    write_json(args.out or speed_path(config["profile"]), record)


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
    try:
        sections = parse_sections(args.sections)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    budget_s = budget_for(args.tiny, args.budget_s, sections)
    if budget_s <= 0:
        raise ConfigError(f"--budget-s must be > 0, got {budget_s}")
    run_check(Path(args.out), args.device, args.tiny, budget_s, sections,
              Path(args.bundle) if args.bundle else None, sys.argv[1:])


def cmd_gpu_bundle(args) -> None:
    from pathlib import Path

    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the reference is a CPU fp32 one, on any machine
    from leanlm.benchmarks.gpucheck.bundle import build_bundle, report

    record = build_bundle(Path(args.out), tiny=args.tiny, wheels=not args.no_wheels)
    print(report(record, Path(args.out)))


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="pretraining throughput: batch build and step time, tokens/s, peak memory, "
                                     "MFU on GPU")
    p.add_argument("--config", default=None,
                   help="a named configuration: bert_base_mha, bert_base_mhe_mul (32 x 512), ch4_standard_500m, "
                        "ch4_approximate_500m (8 x 2048); see leanlm.benchmarks.pretraining.BENCH_CONFIGS")
    p.add_argument("--run", default=None, help="bench this run of --params (its model, objective, vocabulary)")
    p.add_argument("--params", default=None, metavar="FILE",
                   help="the profile of --run (default: params/paper.yaml) or of --speed (default: params/smoke.yaml)")
    p.add_argument("--subset", default=None, metavar="NAME", help="with --speed: the profile's subset NAME")
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
    p.add_argument("--profile-steps", type=int, default=0,
                   help="profile this many more loop steps after the timed ones: time by kind of kernel or "
                        "operator and the longest ones (docs/benchmarks.md)")
    p.add_argument("--build-only", action="store_true",
                   help="time the batch building alone (no model; the host's share at any size)")
    p.add_argument("--parity", default=None, choices=["decoder", "bert", "all"],
                   help="instead: our backbone against its transformers twin at an equal config, interleaved "
                        "in this process (--steps rounds after --warmup; leanlm.benchmarks.parity)")
    p.add_argument("--speed", action="store_true",
                   help="instead: ch. 2's pretraining time per sample of --params's BERT-MLM, BERT-S+R and "
                        "HashFormers, interleaved rounds at its `speed` settings (Table 2.3, the speed claims; "
                        "leanlm.benchmarks.objective_speed); writes results/<profile>/speed/ch2_hashformers.json "
                        "unless --out")
    p.add_argument("--no-memory", action="store_true", help="with --parity: skip the peak-memory processes")
    p.add_argument("--out", default=None, help="also write the report as JSON here")
    p.set_defaults(func=cmd_bench)


def add_budget(sub) -> None:
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


def add_gpu_check(sub) -> None:
    p = sub.add_parser("gpu-check", help="the GPU check (docs/gpu-check.md): environment and SDPA kernels, BERT-base "
                                         "and ch. 4 throughput and MFU, leanlm vs transformers, the pipeline's "
                                         "commands; every sub-step recorded in OUT/gpu_check.json")
    p.add_argument("--out", required=True, help="folder for gpu_check.json (and pipeline.log)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where to run (default cuda)")
    p.add_argument("--tiny", action="store_true",
                   help="every section at tiny sizes (what CI runs with --device cpu); without --bundle a tiny "
                        "bundle is made first")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds for the whole check, shared by the sections (default: the chosen sections' "
                        "seconds in the two device calls, docs/gpu-check.md; with --tiny 3600, since the tiny "
                        "run checks that every path works, not how fast); a sub-step that would not fit is "
                        "recorded as skipped")
    p.add_argument("--bundle", default=None, help="the folder `make gpu-bundle` made (default: none; sections 4 and "
                                                  "5 need one, except with --tiny)")
    p.add_argument("--sections", default=None,
                   help="only these sections, e.g. 1,4 or environment,correctness (default: all five)")
    p.set_defaults(func=cmd_gpu_check)


def add_gpu_bundle(sub) -> None:
    p = sub.add_parser("gpu-bundle", help="prepare what travels to the GPU machine (make gpu-bundle): data, CPU "
                                          "fp32 reference, wheels; prints its size and the device command")
    p.add_argument("--out", default=".gpu-bundle", help="bundle folder, replaced whole (default .gpu-bundle)")
    p.add_argument("--tiny", action="store_true", help="a tiny bundle, for `gpu-check --tiny --bundle`")
    p.add_argument("--no-wheels", action="store_true", help="leave out the wheels (a bundle for this machine)")
    p.set_defaults(func=cmd_gpu_bundle)
