"""The data commands: ``validate`` (a profile and its runs), ``data`` (one data stage), ``mirror`` and
``fixtures`` (the hub mirror)."""

from __future__ import annotations

from leanlm.commands.common import _config, _params_arg


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
    for run in runs(config, with_replicas=True):  # each pretraining replica too (profile key pretrain_seeds)
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


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="validate a profile and list its runs")
    _params_arg(p)
    p.set_defaults(func=cmd_validate)


def add_data(sub) -> None:
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


def add_mirror(sub) -> None:
    p = sub.add_parser("mirror", help="fill the hub mirror (data.hub_mirror) with what the profile reads from the "
                                      "hub, on a machine with network, and report its size")
    _params_arg(p)
    p.add_argument("--out", default=None, help="mirror directory (default: data.hub_mirror or $LEANLM_HUB_MIRROR)")
    p.set_defaults(func=cmd_mirror)


def add_fixtures(sub) -> None:
    p = sub.add_parser("fixtures", help="write the hub mirror of a profile with data.hub_fixtures (the rehearsal) from "
                                        "generated fixtures in the hub's schemas (leanlm.data.fixtures)")
    _params_arg(p)
    p.add_argument("--out", default=None, help="mirror directory (default: the profile's data.hub_mirror)")
    p.set_defaults(func=cmd_fixtures)
