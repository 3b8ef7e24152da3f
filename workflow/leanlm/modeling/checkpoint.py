"""Checkpoints: ``model.safetensors`` + ``config.json`` in one directory, loadable with one call.

``config.json`` holds the kind of model (``mlm`` or ``classification``), ``num_labels``, the
:class:`ModelConfig`, the caller's ``extra`` (step, metrics, ...) and the names of tied tensors.
safetensors refuses tensors that share memory, so each tied tensor is stored once and the aliases
are filled in from it on load (the model ties them again by construction). Both files are written
atomically, weights first: a directory with a config.json always has complete weights. config.json
records the SHA-256 of the weights as written, and loading checks it: damaged bytes are refused by name
instead of giving a model that fine-tunes to NaN.

The export to ``transformers``' layout is :mod:`leanlm.export` (``leanlm export-hf``).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from leanlm.errors import ConfigError, TrainingError
from leanlm.io import atomic_path, sha256_file, write_json
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model, head_of, model_class, transfer_backbone

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT = "leanlm-checkpoint"
FORMAT_VERSION = 1


def model_kind(model: nn.Module) -> str:
    """The head name a model registered under (``mlm``, ``classification``, ``causal_lm``, ...)."""
    try:
        return head_of(model)
    except TypeError:
        raise TypeError(f"cannot checkpoint {type(model).__name__}: it is not registered in "
                        f"leanlm.modeling.models.MODELS") from None


def deduplicated_state(model: nn.Module, state: dict[str, torch.Tensor] | None = None
                        ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """State dict (``state``, default the model's) with each shared tensor once, and ``{alias: stored
    key}`` for the others."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    owner: dict[tuple, str] = {}
    for key, t in (model.state_dict() if state is None else state).items():
        ident = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                 tuple(t.stride()), t.dtype)
        if ident in owner:
            aliases[key] = owner[ident]
        else:
            owner[ident] = key
            tensors[key] = t.detach().to("cpu").contiguous()
    return tensors, aliases


def save_checkpoint(model: nn.Module, config: ModelConfig, directory: str | os.PathLike,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory`` atomically; returns it."""
    directory = Path(directory)
    kind = model_kind(model)
    tensors, aliases = deduplicated_state(model)
    with atomic_path(directory / WEIGHTS_NAME, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        digest = sha256_file(tmp)
    write_json(directory / CONFIG_NAME, {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "num_labels": getattr(model, "num_labels", None),
        "model": config.to_dict(),
        "tied": aliases,
        "extra": extra or {},
        "sha256": {WEIGHTS_NAME: digest},
    })
    return directory


def read_checkpoint_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of a checkpoint (TrainingError naming the file if unusable)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise TrainingError(f"checkpoint config {path} is missing; was the checkpoint written "
                            f"completely? Re-run the stage that produces {Path(directory)}")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TrainingError(f"checkpoint config {path} is corrupt ({err}); delete the checkpoint "
                            f"and re-run the stage that produces it") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("kind"), str):
        raise TrainingError(f"{path} is not a leanlm checkpoint config (format {FORMAT!r} with "
                            f"a model kind)")
    return meta


def _read_weights(directory: Path, aliases: dict[str, str], sha256: str | None = None) -> dict[str, torch.Tensor]:
    path = directory / WEIGHTS_NAME
    if not path.is_file():
        raise TrainingError(f"checkpoint weights {path} are missing; re-run the stage that "
                            f"produces {directory}")
    if sha256 is not None and (actual := sha256_file(path)) != sha256:
        raise TrainingError(f"checkpoint weights {path} are damaged: their SHA-256 is {actual}, but "
                            f"{sha256} was recorded in {directory / CONFIG_NAME} when they were written. "
                            f"Delete {path} and {directory / CONFIG_NAME} and re-run the stage that "
                            f"produces them")
    try:
        tensors = load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for truncated/garbled files
        raise TrainingError(f"checkpoint weights {path} are corrupt ({type(err).__name__}: {err}); "
                            f"delete the checkpoint and re-run the stage that produces it") from None
    for alias, key in aliases.items():
        if key not in tensors:
            raise TrainingError(f"checkpoint weights {path} lack {key!r}, which {alias!r} is tied to")
        tensors[alias] = tensors[key]
    return tensors


def load_model(directory: str | os.PathLike, kind: str | None = None,
               num_labels: int | None = None, **head_kwargs: Any) -> nn.Module:
    """Rebuild the model saved in ``directory`` on the CPU (in train mode; call ``.eval()`` to infer).

    ``kind`` is a head name (default: the saved one). Asking for another head than the saved one
    (e.g. ``"classification"`` on an MLM checkpoint) builds that model fresh and takes over the
    pretrained backbone: the fine-tuning start. ``num_labels`` defaults to the saved one.
    """
    directory = Path(directory)
    meta = read_checkpoint_meta(directory)
    config_path = directory / CONFIG_NAME
    fields = meta.get("model", {})
    if isinstance(fields, dict) and "pad_vocab_to" not in fields:
        # Written before vocabulary tables were padded (ModelConfig.pad_vocab_to): its tables have
        # vocab_size rows, so the model is rebuilt unpadded, as it was trained.
        fields = {**fields, "pad_vocab_to": 1}
    try:
        config = ModelConfig.from_dict(fields, where=f"{config_path}: model")
    except ConfigError as err:
        raise TrainingError(f"checkpoint config is unusable: {err}") from None
    saved_kind = meta["kind"]
    kind = kind or saved_kind
    cls = model_class(config.backbone, kind)  # ConfigError naming the backbone's heads if unknown
    if kind != saved_kind and not getattr(cls, "backbone_prefix", ""):
        # Only fine-tuning models (those with a backbone_prefix) start from another head's weights.
        raise TrainingError(f"{directory} holds a {saved_kind} model; a {kind} model cannot be "
                            f"loaded from it")
    recorded = meta.get("sha256")  # absent in checkpoints written before checksums were recorded
    tensors = _read_weights(directory, meta.get("tied", {}),
                            recorded.get(WEIGHTS_NAME) if isinstance(recorded, dict) else None)
    labels = num_labels if num_labels is not None else meta.get("num_labels")
    takes_labels = "num_labels" in inspect.signature(cls.__init__).parameters
    if takes_labels and labels is not None:
        head_kwargs["num_labels"] = labels
    elif takes_labels:
        raise ConfigError(f"loading {directory} (a {saved_kind} checkpoint) as a classifier needs "
                          f"num_labels")
    if kind == saved_kind and hasattr(cls, "options_from_weights"):  # a head option the weights tell (S+R's)
        head_kwargs = {**cls.options_from_weights(tensors), **head_kwargs}
    model = build_model(config, kind, **head_kwargs)
    if kind != saved_kind:
        return transfer_backbone(model, tensors)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as err:
        raise TrainingError(f"checkpoint weights {directory / WEIGHTS_NAME} do not fit its config "
                            f"(kind={kind}, num_labels={num_labels}): {err}") from None
    return model
