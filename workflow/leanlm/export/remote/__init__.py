"""Exports with their own model code (``trust_remote_code``), for the leanlm models that have no stock
``transformers`` class.

The model code is this folder's ``configuration_leanlm.py`` and ``modeling_leanlm_*.py``: real modules that
import only torch and transformers (tests/test_export_remote.py imports them directly too), copied
verbatim into the export, where ``config.json``'s ``auto_map`` points ``AutoConfig`` / ``AutoModelFor*`` at
them. Beside each template, the map from a leanlm model to its ``config.json`` fields and weights
(:data:`REMOTE_TARGETS`, a :class:`~leanlm.modeling.hf_layout.fields.Target` per backbone, whose every config
field is classified as for the stock classes). docs/export.md says which variants go which way.
"""

from __future__ import annotations

from leanlm.export.remote.ch3 import LEANLM_BERT, LEANLM_GPT2
from leanlm.export.remote.qwen import LEANLM_QWEN
from leanlm.export.remote.seq2seq import LEANLM_TRANSFORMER
from leanlm.modeling.hf_layout.fields import Target

REMOTE_TARGETS: dict[str, Target] = {t.backbone: t for t in (LEANLM_BERT, LEANLM_GPT2, LEANLM_QWEN,
                                                               LEANLM_TRANSFORMER)}

__all__ = ["REMOTE_TARGETS"]
