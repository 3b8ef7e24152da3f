"""Where things live. Every path is relative to the project root (the folder with the Snakefile).

The root is, in this order:

1. ``$LEANLM_ROOT`` when set (tests point it at a scratch copy; a job can name its project);
2. the nearest folder, from the working directory upward, that is a leanlm project (:func:`is_project`:
   a Snakefile and ``workflow/schemas/``), so that ``leanlm`` run in a project's subfolder uses that project
   and another tool's Snakefile is not taken for one;
3. the project the running ``leanlm`` package lives in (``<root>/workflow/leanlm``: a clone, installed
   editable or put on PYTHONPATH), so that ``leanlm`` works from any directory;
4. else the working directory, where reading a project file fails naming the file and LEANLM_ROOT
   (:func:`project_file`).
"""

from __future__ import annotations

import os
from pathlib import Path

from leanlm.fixed_files import once

ROOT_ENV = "LEANLM_ROOT"


def is_project(folder: Path) -> bool:
    """Whether ``folder`` holds a leanlm project: its Snakefile and the params schemas."""
    return (folder / "Snakefile").is_file() and (folder / "workflow" / "schemas").is_dir()


def project_root() -> Path:
    """``$LEANLM_ROOT``, else the nearest folder at or above the working directory that holds a project, else the
    one around the package, else the working directory (found once per pass over unchanging files)."""
    env = os.environ.get(ROOT_ENV)
    # the working directory only where it is looked at: with the variable set, it may even be gone
    return once(("project root", env) if env else ("project root", None, os.getcwd()), _find_project_root)


def _find_project_root() -> Path:
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if is_project(candidate):
            return candidate
    package_home = Path(__file__).resolve().parents[2]  # <root>/workflow/leanlm/paths.py
    return package_home if is_project(package_home) else here


def project_file(*parts: str) -> Path:
    """A file the project ships (a schema, a template), relative to the project root; ConfigError naming it,
    and how the root was chosen, when it does not exist."""
    path = project_root().joinpath(*parts)
    if not path.is_file():
        from leanlm.errors import ConfigError

        chosen = (f"{ROOT_ENV}={os.environ[ROOT_ENV]}" if os.environ.get(ROOT_ENV)
                  else "no leanlm project (a Snakefile and workflow/schemas/) above the working directory or "
                       "around the leanlm package")
        raise ConfigError(f"{path} does not exist: the project root {project_root()} is not a leanlm project "
                          f"({chosen}). Run leanlm inside the project, or set {ROOT_ENV} to the project folder")
    return path


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


def in_cache(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies in :func:`cache_dir` (as the cache's users name their files: unresolved)."""
    return Path(path).is_relative_to(cache_dir())
