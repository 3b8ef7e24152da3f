"""leanlm: reproduction pipeline and model library for Xue (2025), *Exploring Efficient Methods for
Transformer-based Foundation Language Models*.

The models live in :mod:`leanlm.modeling`, the data stages in :mod:`leanlm.data`, the training
engine in :mod:`leanlm.training`, metrics in :mod:`leanlm.evaluation` and table rendering in
:mod:`leanlm.reporting`. Every pipeline stage is a ``leanlm`` subcommand (:mod:`leanlm.cli`).
"""

__version__ = "0.1.0"
