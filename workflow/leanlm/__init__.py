"""leanlm: reproduction pipeline and model library for Xue (2025), *Exploring Efficient Methods for
Transformer-based Foundation Language Models*.

The core: the models live in :mod:`leanlm.modeling`, the data stages in :mod:`leanlm.data`, the training
engine and the pretrain / finetune stages in :mod:`leanlm.training`, metrics in :mod:`leanlm.evaluation`
and the reporting machinery in :mod:`leanlm.reporting`. The plug-ins, found by dotted path
(:mod:`leanlm.plugins`) and never imported by the core: pretraining objectives in :mod:`leanlm.objectives`,
fine-tuning runners in :mod:`leanlm.runners`, each chapter's tables and figures in
``leanlm.reporting.ch2`` / ``ch3`` / ``ch4``. Every pipeline stage is a ``leanlm`` subcommand
(:mod:`leanlm.cli`); :mod:`leanlm.job_code` gives each rule the hash of the code its job runs.
"""

__version__ = "0.1.0"
