"""Attention variants, chosen by the name the thesis uses: ``build_attention("mhe_mul", ...)``.

Importing this package registers every variant in :data:`ATTENTION`. To add one, write a small
subclass of :class:`Attention` in its own module, register it, and import the module here.
"""

from leanlm.modeling.attention.base import ATTENTION, Attention, build_attention
from leanlm.modeling.attention.mha import MultiHeadAttention
from leanlm.modeling.attention.mhe import (
    MHEAddAttention,
    MHEMulAttention,
    MultiHeadEmbeddingAttention,
)
from leanlm.modeling.attention.sha import SingleHeadAttention

__all__ = [
    "ATTENTION",
    "Attention",
    "build_attention",
    "MultiHeadAttention",
    "SingleHeadAttention",
    "MultiHeadEmbeddingAttention",
    "MHEAddAttention",
    "MHEMulAttention",
]
