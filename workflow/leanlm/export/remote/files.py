"""Where the self-contained model code of a ``trust_remote_code`` export comes from: this folder's
``configuration_*.py`` / ``modeling_*.py``, real modules (imported and tested as such) that import only
torch and transformers, copied verbatim beside the weights."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent
CONFIG_FILE = "configuration_leanlm.py"
# The configuration class of each backbone (one per backbone: transformers' Auto registry needs it so).
CONFIG_CLASSES = {"bert": "LeanBertConfig", "gpt2": "LeanGPT2Config", "qwen": "LeanQwenConfig",
                  "transformer": "LeanTransformerConfig"}
# The Auto class that loads each leanlm head (checkpoint kind).
AUTO_CLASSES = {"causal_lm": "AutoModelForCausalLM", "mlm": "AutoModelForMaskedLM",
                "classification": "AutoModelForSequenceClassification",
                "shuffle_random": "AutoModelForTokenClassification",
                "shuffle_random:official_code": "AutoModelForTokenClassification",
                "seq2seq": "AutoModelForSeq2SeqLM"}


def auto_map(backbone: str, models: dict[str, str]) -> dict[str, str]:
    """config.json's ``auto_map``: which file and class each ``Auto*`` class loads."""
    return {"AutoConfig": f"{CONFIG_FILE[:-3]}.{CONFIG_CLASSES[backbone]}", **models}


def leanlm_fields(config, kind: str, modeling: str, cls: str, labels: dict[str, Any] | None = None,
                  base: str | None = None) -> dict[str, Any]:
    """config.json of a self-contained export: every leanlm model field under its own name, the class,
    ``auto_map`` pointing the head's Auto class at ``modeling.cls`` (and ``AutoModel`` at the model without
    its head, ``base``), and a classifier's labels (leanlm.modeling.hf_layout.fields.label_fields)."""
    models = {AUTO_CLASSES[kind]: f"{modeling}.{cls}", **({"AutoModel": f"{modeling}.{base}"} if base else {})}
    return {**dataclasses.asdict(config), "model_type": f"leanlm_{config.backbone}", "architectures": [cls],
            "auto_map": auto_map(config.backbone, models), **(labels or {})}


def copy_code(names: tuple[str, ...], out: Path) -> None:
    """Copy the named template files into ``out``."""
    for name in names:
        shutil.copyfile(TEMPLATES / name, out / name)
