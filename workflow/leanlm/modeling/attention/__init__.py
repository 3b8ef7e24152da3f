"""Attention variants, chosen by the name the thesis uses: ``build_attention("mhe_mul", ...)``.

Importing this package registers every variant in :data:`ATTENTION`. To add one, write a small
subclass of :class:`Attention` in its own module, register it, and import the module here.

Softmax variants (ch. 3): sha, mha, el_att, mqa, skv, mhe_add, mhe_mul. Token mixers (Lee-Thorp et
al.'s baselines): fnet, linear; they take ``max_len`` and declare ``supports_causal`` /
``supports_cross`` (see :mod:`leanlm.modeling.attention.token_mixing`).
"""

from leanlm.modeling.attention.base import ATTENTION, Attention, build_attention
from leanlm.modeling.attention.el_att import ELAttention
from leanlm.modeling.attention.fnet import FNetMixing
from leanlm.modeling.attention.linear_mixing import LinearMixing
from leanlm.modeling.attention.mha import MultiHeadAttention
from leanlm.modeling.attention.mhe import (
    MHEAddAttention,
    MHEMulAttention,
    MultiHeadEmbeddingAttention,
)
from leanlm.modeling.attention.mqa import MQAttention
from leanlm.modeling.attention.sha import SingleHeadAttention
from leanlm.modeling.attention.skv import SKVAttention
from leanlm.modeling.attention.token_mixing import DEFAULT_MAX_LEN, TokenMixing

__all__ = [
    "ATTENTION",
    "Attention",
    "build_attention",
    "MultiHeadAttention",
    "SingleHeadAttention",
    "ELAttention",
    "MQAttention",
    "SKVAttention",
    "MultiHeadEmbeddingAttention",
    "MHEAddAttention",
    "MHEMulAttention",
    "TokenMixing",
    "FNetMixing",
    "LinearMixing",
    "DEFAULT_MAX_LEN",
]
