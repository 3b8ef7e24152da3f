"""Ch. 3's attention variants, chosen by the name the thesis uses (``config.attention``).

The folder is the registry (:data:`ATTENTION`, leanlm.modeling.variants): a module declares its variants
with ``@ATTENTION.register("name")`` on a subclass of :class:`Attention`, read from the source, and is
imported only when a model builds one of them. A new variant is one new file here (docs/extending.md);
shared code (base.py, token_mixing.py) declares none. Backbones build a block's sublayer with
:func:`attention_sublayer` (the config in, the variant takes what it declares); :func:`build_attention`
builds one by name and sizes (tests, tables).

Softmax variants (ch. 3): sha, mha, el_att, mqa, skv, mhe_add, mhe_mul, and gqa (grouped-query, option
``n_kv_heads``; not in the thesis). Token mixers (Lee-Thorp et al.'s baselines): fnet, linear; they take
``max_len`` and declare ``supports_causal`` / ``supports_cross`` (see :mod:`leanlm.modeling.attention.token_mixing`).
"""

from leanlm.modeling.attention.base import ATTENTION, Attention, attention_sublayer, build_attention
from leanlm.modeling.attention.token_mixing import DEFAULT_MAX_LEN, TokenMixing

__all__ = ["ATTENTION", "Attention", "attention_sublayer", "build_attention", "TokenMixing", "DEFAULT_MAX_LEN"]
