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

The folder is the registry (:data:`MIXERS`, leanlm.modeling.variants): a module declares its mixers with
``@MIXERS.register("name")``, read from the source, and is imported only when a model builds one of them
(ModelConfig accepts these names). A new mixer is one new file here; shared code (base.py, taylor.py,
taylor_features.py) declares none. The Qwen block's own feed-forward :class:`GatedMLP` lives in base.py.
"""

from leanlm.modeling.mixers.base import MIXERS, GatedMLP, Mixer, MixerContext, RMSNorm, build_mixer

# The thesis's row order in Tables 4.1 and 4.5-4.8.
CH4_VARIANTS = ["standard", "mlp", "approximate", "non_approximate", "rnd_emb_qk", "fixed_seq_qk",
                "static_emb_qk"]

__all__ = ["MIXERS", "Mixer", "MixerContext", "RMSNorm", "build_mixer", "CH4_VARIANTS", "GatedMLP"]
