"""Where things live. Every path is relative to the project root (the folder with the Snakefile).

The root is ``$LEANLM_ROOT`` when set (tests point it at a scratch copy), else the nearest parent of
the working directory holding a Snakefile, else the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("LEANLM_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "Snakefile").is_file():
            return candidate
    return here


def params_dir() -> Path:
    return project_root() / "params"


def data_dir(profile: str) -> Path:
    return project_root() / "data" / profile


def models_dir(profile: str) -> Path:
    return project_root() / "models" / profile


def results_dir(profile: str) -> Path:
    return project_root() / "results" / profile


def pretrain_outputs(profile: str, run_id: str) -> list[str]:
    """The pretrain rule's outputs for one run (workflow/rules/pretrain.smk), relative to the project root,
    as Snakemake names them in its records."""
    return [f"models/{profile}/{run_id}/model.safetensors", f"models/{profile}/{run_id}/config.json",
            f"results/{profile}/runs/{run_id}/pretrain.json"]


def tables_dir(profile: str) -> Path:
    return project_root() / "paper_tables" / profile


def templates_dir() -> Path:
    return project_root() / "workflow" / "templates"


def cache_dir() -> Path:
    """Downloads (registry packages, hub files) are cached here, outside git and outside data/."""
    env = os.environ.get("LEANLM_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(xdg) / "leanlm"
