"""Trained models in ``transformers``' layout: ``leanlm export-hf`` (:func:`leanlm.export.hf.export_hf`).

What exports to which class, what is refused and why: docs/export.md. The layouts themselves (names,
config fields, the field check) are the model library's, :mod:`leanlm.modeling.hf_layout`; this package
adds the run's tokenizer, the check that transformers computes leanlm's logits, and the atomic write.
"""

from leanlm.export.hf import export_hf

__all__ = ["export_hf"]
