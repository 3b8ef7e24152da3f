"""The ``share`` command: a profile's outputs to and from a DVC remote."""

from __future__ import annotations

from leanlm.commands.common import _config, _params_arg


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


def add_share(sub) -> None:
    p = sub.add_parser("share", help="push a profile's data, models and results to a DVC remote (with Snakemake's "
                                      "records of them), or pull them into a clone")
    p.add_argument("action", choices=["push", "pull"])
    _params_arg(p)
    p.add_argument("--remote", default=None, help="DVC remote name (default: the default remote)")
    p.set_defaults(func=cmd_share)
