"""Ch. 4's token mixers ("attention variants"), chosen by name: ``build_mixer("rnd_emb_qk", config)``.

========================  ===========================  =======================================
name                      thesis                        relaxes
========================  ===========================  =======================================
``standard``              Standard (eqs. 4.1-4.3)       nothing (the baseline)
``mlp``                   MLP (4.4-4.5)                 token mixing
``approximate``           Approximate (4.6)             mathematical form (Taylor, joint norm.)
``approximate_per_term``  Approximate, appendix 4.14-17 the same, per-term normalisation
``non_approximate``       Non-approximate (4.7-4.8)     mathematical form
``rnd_emb_qk``            RndEmbQK (4.9-4.10)           sequence dependency
``fixed_seq_qk``          FixedSeqQK (4.11-4.12)        sequence dependency
``static_emb_qk``         StaticEmbQK (4.13)            current Q/K
========================  ===========================  =======================================

Importing this package registers every mixer in :data:`MIXERS` (ModelConfig accepts these names).
"""

from leanlm.modeling.mixers.base import MIXERS, Mixer, MixerContext, RMSNorm, build_mixer
from leanlm.modeling.mixers.fixed_qk import (
    FixedSeqQKAttention,
    RndEmbQKAttention,
    StaticEmbQKAttention,
)
from leanlm.modeling.mixers.linear import ApproximateAttention, ApproximatePerTermAttention
from leanlm.modeling.mixers.mlp import GatedMLP, MLPMixer
from leanlm.modeling.mixers.non_approximate import NonApproximateAttention
from leanlm.modeling.mixers.standard import StandardAttention

# The thesis's row order in Tables 4.1 and 4.5-4.8.
CH4_VARIANTS = ["standard", "mlp", "approximate", "non_approximate", "rnd_emb_qk", "fixed_seq_qk",
                "static_emb_qk"]

__all__ = [
    "MIXERS", "Mixer", "MixerContext", "RMSNorm", "build_mixer", "CH4_VARIANTS", "GatedMLP",
    "StandardAttention", "MLPMixer", "ApproximateAttention", "ApproximatePerTermAttention",
    "NonApproximateAttention", "RndEmbQKAttention", "FixedSeqQKAttention", "StaticEmbQKAttention",
]
