"""Where the self-contained model code of a ``trust_remote_code`` export comes from: this folder's
``configuration_*.py`` / ``modeling_*.py``, real modules (imported and tested as such) that import only
torch and transformers, copied verbatim beside the weights."""

from __future__ import annotations

import shutil
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent
CONFIG_CLASS = "configuration_leanlm.LeanLMConfig"


def auto_map(models: dict[str, str]) -> dict[str, str]:
    """config.json's ``auto_map``: which file and class each ``Auto*`` class loads."""
    return {"AutoConfig": CONFIG_CLASS, **models}


def copy_code(names: tuple[str, ...], out: Path) -> None:
    """Copy the named template files into ``out``."""
    for name in names:
        shutil.copyfile(TEMPLATES / name, out / name)
