"""The model commands: ``pretrain`` and ``finetune`` (one job of the matrix), ``export-hf``."""

from __future__ import annotations

import logging

from leanlm.commands.common import _config, _params_arg


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


def cmd_export_hf(args) -> None:
    from leanlm.export import export_hf

    export_hf(args.checkpoint, args.out)
    print(args.out)


def add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="pretrain one model of the experiment matrix")
    _params_arg(p)
    p.add_argument("--run", required=True, help="run id, e.g. ch3_encoder-mhe_mul (see `leanlm validate`)")
    p.add_argument("--keep-checkpoint", action="store_true",
                   help="leave the final training checkpoint in the run folder (the pipeline deletes it once "
                        "Snakemake has recorded the outputs); by default it is deleted once the model is written")
    p.set_defaults(func=cmd_pretrain)


def add_finetune(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune and evaluate one model on one task family, all seeds")
    _params_arg(p)
    p.add_argument("--run", required=True)
    p.add_argument("--family", required=True, help="task family, e.g. glue")
    p.set_defaults(func=cmd_finetune)


def add_export_hf(sub) -> None:
    p = sub.add_parser("export-hf", help="export a checkpoint in a Hugging Face compatible layout")
    p.add_argument("checkpoint", help="models/<profile>/<run_id>")
    p.add_argument("out", help="output directory")
    p.set_defaults(func=cmd_export_hf)
