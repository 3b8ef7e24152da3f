"""What every command shares: the ``--params``/``--subset`` arguments and the profile they name."""

from __future__ import annotations

import argparse


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
