"""A local mirror of what the ``hub`` source reads, for compute nodes without network.

Most clusters' compute nodes cannot reach huggingface.co. A mirror is a directory filled once on a
machine with network (``leanlm mirror --params params/paper.yaml``) and read by the hub source when it
is set, by ``LEANLM_HUB_MIRROR`` (an environment variable, which wins) or by ``data.hub_mirror`` in the
profile. Its contents keep the hub's own schemas, so the same mapping code reads them:

- ``datasets/<dataset id>/<config or "default">/``: a ``DatasetDict`` written with
  ``save_to_disk`` (every split the pipeline reads, the hub's features and column types unchanged);
  this holds the fine-tuned task sets and also the datasets of chapter 4's lm-eval tasks, under the
  ``dataset_path``/``dataset_name`` lm-eval's own task config names (``allenai/ai2_arc/ARC-Easy``,
  ``aps/super_glue/boolq``, ``baber/piqa/default``, ``EleutherAI/wikitext_document_level/wikitext-2-raw-v1``,
  ...), each with every split that config names;
- ``corpora/<dataset id>/<config or "default">/<split>/``: a streamed pretraining split (its first
  documents only when the profile caps them), also ``save_to_disk``;
- ``tokenizers/<hub id>/``: ``save_pretrained`` of the hub tokenizer (``tokenizer.json`` etc.);
- ``models/<hub id>/``: ``save_pretrained`` of a hub checkpoint a run starts from (CANINE-C);
- ``MIRROR.json``: what was mirrored, from which profile, and the size.

:func:`active_mirror` says where the mirror is (None when none is set); the loaders of
:mod:`leanlm.data.sources.hub`, :mod:`leanlm.data.families.squad`, :mod:`leanlm.data.families.lm`,
:mod:`leanlm.data.pretrain_data`, :mod:`leanlm.data.tokenizer` and
:mod:`leanlm.training.hub_checkpoint` read from it first and never touch
the network then; lm-eval's own tasks are pointed at it by :mod:`leanlm.lm_eval.mirror` (their
definitions unchanged, only ``dataset_path``/``dataset_kwargs`` redirected to the Arrow files here). A set mirror that lacks an item is an error naming the item and the command that
fills it; no mirror and no network keep the fail-fast message, which names the mirror setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from leanlm.errors import DataError

ENV_VAR = "LEANLM_HUB_MIRROR"
SETTING = "data.hub_mirror"
DEFAULT_CONFIG = "default"
_configured: Path | None = None  # data.hub_mirror of the profile this process runs (configure_mirror)
_disabled = False  # while `leanlm mirror` fills the mirror, the loaders must go to the hub


def configure_mirror(config: dict) -> Path | None:
    """Remember the profile's ``data.hub_mirror`` (relative paths resolve against the working
    directory) for the loaders of this process; returns the active mirror."""
    global _configured, _disabled
    setting = (config.get("data") or {}).get("hub_mirror")
    _configured = Path(setting).expanduser().resolve() if setting else None
    _disabled = False
    return active_mirror()


def disable_mirror() -> None:
    """Make :func:`active_mirror` None until the next :func:`configure_mirror` (filling the mirror)."""
    global _disabled
    _disabled = True


def active_mirror() -> Path | None:
    """The mirror directory: ``$LEANLM_HUB_MIRROR``, else the profile's ``data.hub_mirror``, else None."""
    if _disabled:
        return None
    env = os.environ.get(ENV_VAR, "").strip()
    return Path(env).expanduser().resolve() if env else _configured


def how_to_fill(profile: str) -> str:
    return (f"fill it on a machine with network with `leanlm mirror --params params/{profile}.yaml` "
            f"and copy it here")


def _config_name(config: str | None) -> str:
    return config or DEFAULT_CONFIG


def dataset_dir(mirror: Path, dataset: str, config: str | None) -> Path:
    return Path(mirror) / "datasets" / dataset / _config_name(config)


def corpus_dir(mirror: Path, dataset: str, config: str | None, split: str) -> Path:
    return Path(mirror) / "corpora" / dataset / _config_name(config) / split


def tokenizer_dir(mirror: Path, name: str) -> Path:
    return Path(mirror) / "tokenizers" / name


def model_dir(mirror: Path, name: str) -> Path:
    return Path(mirror) / "models" / name


def _missing(what: str, path: Path, profile: str) -> DataError:
    return DataError(f"the hub mirror ({ENV_VAR} or {SETTING}) has no {what} at {path}; {how_to_fill(profile)}")


def mirrored_dataset(dataset: str, config: str | None, profile: str, splits: tuple[str, ...] = ()) -> Any | None:
    """The mirrored ``DatasetDict`` of ``dataset``/``config`` (None when no mirror is set); a set mirror
    without it, or without one of ``splits``, is a DataError naming what to fill."""
    mirror = active_mirror()
    if mirror is None:
        return None
    path = dataset_dir(mirror, dataset, config)
    if not (path / "dataset_dict.json").is_file():
        raise _missing(f"dataset {dataset} (config {config})", path, profile)
    import datasets

    loaded = datasets.load_from_disk(str(path))
    absent = [s for s in splits if s not in loaded]
    if absent:
        raise _missing(f"split(s) {', '.join(absent)} of {dataset} (config {config}; it has "
                       f"{', '.join(loaded)})", path, profile)
    return loaded


def mirrored_corpus(dataset: str, config: str | None, split: str, profile: str) -> Any | None:
    """The mirrored pretraining split as an ``IterableDataset`` (what streaming gives), or None."""
    mirror = active_mirror()
    if mirror is None:
        return None
    path = corpus_dir(mirror, dataset, config, split)
    if not (path / "dataset_info.json").is_file():
        raise _missing(f"corpus split {dataset} (config {config}, split {split})", path, profile)
    import datasets

    return datasets.load_from_disk(str(path)).to_iterable_dataset()


def mirrored_tokenizer(name: str, profile: str) -> Path | None:
    """The mirrored tokenizer folder of hub id ``name``, or None when no mirror is set."""
    mirror = active_mirror()
    if mirror is None:
        return None
    path = tokenizer_dir(mirror, name)
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise _missing(f"tokenizer {name}", path, profile)
    return path


def mirrored_model(name: str, profile: str) -> Path | None:
    """The mirrored checkpoint folder of hub id ``name`` (``config.json`` + weights), or None."""
    mirror = active_mirror()
    if mirror is None:
        return None
    path = model_dir(mirror, name)
    if not (path / "config.json").is_file():
        raise _missing(f"checkpoint {name}", path, profile)
    return path


def directory_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
