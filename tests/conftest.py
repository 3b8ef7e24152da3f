"""Shared test setup: offline hub settings and a scratch project root."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Tests never touch the network: make any hub call fail at once instead of after a long timeout.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """A project root holding copies of params/, dvc.yaml, the schemas and the templates, which tests may edit;
    LEANLM_ROOT points at it, so outputs land there too."""
    from leanlm.config import _load_matrix_cached

    shutil.copytree(REPO / "params", tmp_path / "params")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")  # the profiles DVC prepares (`leanlm validate` checks)
    shutil.copy(REPO / "dvc_stages.yaml", tmp_path / "dvc_stages.yaml")  # those whose stages DVC defines
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, tmp_path / "workflow" / sub)
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    _load_matrix_cached.cache_clear()
    yield tmp_path
    _load_matrix_cached.cache_clear()


@pytest.fixture
def offline_with(monkeypatch):
    """Offline (the hub unreachable), with the mirror given by LEANLM_HUB_MIRROR or not at all: call the
    fixture with a mirror folder or None (the hub-mirror and lm-eval-mirror tests)."""
    from leanlm.data.sources import hub
    from leanlm.data.plumbing import mirror

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub, "_reachable", False)
    mirror.configure_mirror({})

    def use(root: Path | None):
        if root is None:
            monkeypatch.delenv(mirror.ENV_VAR, raising=False)
        else:
            monkeypatch.setenv(mirror.ENV_VAR, str(root))

    yield use
    mirror.configure_mirror({})


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """(tests of what an edit reruns) A copy of the leanlm sources that provenance fingerprints instead of the working tree's."""
    from leanlm import provenance

    copy = tmp_path / "leanlm"
    shutil.copytree(provenance.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    provenance._direct_imports.cache_clear()
    yield copy
    provenance._direct_imports.cache_clear()
