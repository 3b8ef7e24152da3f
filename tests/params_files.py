"""Editing a scratch project's params files in tests (the ``scratch_root`` fixture's copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import yaml

from leanlm.config import _load_matrix_cached


def edit_yaml(path: Path, change: Callable[[dict], object]) -> None:
    """Load the YAML file ``path``, let ``change`` edit the document in place, write it back, and forget
    the cached experiment matrix so the next load_config reads the edit."""
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    _load_matrix_cached.cache_clear()
