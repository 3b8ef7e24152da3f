"""The model library: configs, attention variants, the BERT encoder, task heads, counting, checkpoints.

    from leanlm.modeling import ModelConfig, BertForMLM
    model = BertForMLM(ModelConfig.preset("base", attention="mhe_mul"))

The names below are imported when first used (PEP 562), not with the package: planning a workflow reads
``leanlm.modeling.config`` and the variant registries' sources, and must not pay for importing torch
(about 1 s a Snakemake call; tests/test_one_job.py::test_planning_imports_no_torch).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "leanlm.modeling.attention": ("ATTENTION", "Attention", "build_attention"),
    "leanlm.modeling.checkpoint": ("load_model", "read_checkpoint_meta", "save_checkpoint"),
    "leanlm.modeling.config": ("PRESETS", "ModelConfig"),
    "leanlm.modeling.counting": ("attention_formula", "attention_parameters", "embedding_parameters",
                                 "model_attention_parameters", "total_parameters"),
    "leanlm.modeling.encoder": ("BertEncoder",),
    "leanlm.modeling.heads": ("BertForMLM", "BertForSequenceClassification"),
    "leanlm.modeling.models": ("MODELS", "build_model", "register_model", "transfer_backbone"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'leanlm.modeling' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
