"""Checkpoints: ``model.safetensors`` + ``config.json`` in one directory, loadable with one call.

``config.json`` holds the kind of model (``mlm`` or ``classification``), ``num_labels``, the
:class:`ModelConfig`, the caller's ``extra`` (step, metrics, ...) and the names of tied tensors.
safetensors refuses tensors that share memory, so each tied tensor is stored once and the aliases
are filled in from it on load (the model ties them again by construction). Both files are written
atomically, weights first: a directory with a config.json always has complete weights. config.json
records the SHA-256 of the weights as written, and loading checks it: damaged bytes are refused by name
instead of giving a model that fine-tunes to NaN.

:func:`export_hf` writes a Hugging Face BERT layout for MHA models, so they load in
``transformers.BertForMaskedLM`` / ``BertForSequenceClassification`` / ``BertModel``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from leanlm.errors import ConfigError, LeanLMError, TrainingError
from leanlm.io import atomic_path, sha256_file, write_json
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model, head_of, model_class, transfer_backbone
from leanlm.modeling.vocab import unpadded_state_dict

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


def _deduplicated_state(model: nn.Module, state: dict[str, torch.Tensor] | None = None
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
    tensors, aliases = _deduplicated_state(model)
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
    model = build_model(config, kind, **head_kwargs)
    if kind != saved_kind:
        return transfer_backbone(model, tensors)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as err:
        raise TrainingError(f"checkpoint weights {directory / WEIGHTS_NAME} do not fit its config "
                            f"(kind={kind}, num_labels={num_labels}): {err}") from None
    return model


# --------------------------------------------------------------------------- Hugging Face export
# Our parameter names -> Hugging Face BERT's. Order matters only for readability.
_HF_RENAMES: list[tuple[str, str]] = [
    (r"^encoder\.embeddings\.norm\.", "bert.embeddings.LayerNorm."),
    (r"^encoder\.embeddings\.", "bert.embeddings."),
    (r"^encoder\.layers\.(\d+)\.attention\.(query|key|value)\.", r"bert.encoder.layer.\1.attention.self.\2."),
    (r"^encoder\.layers\.(\d+)\.attention\.output\.", r"bert.encoder.layer.\1.attention.output.dense."),
    (r"^encoder\.layers\.(\d+)\.attention_norm\.", r"bert.encoder.layer.\1.attention.output.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.intermediate\.", r"bert.encoder.layer.\1.intermediate.dense."),
    (r"^encoder\.layers\.(\d+)\.output\.", r"bert.encoder.layer.\1.output.dense."),
    (r"^encoder\.layers\.(\d+)\.output_norm\.", r"bert.encoder.layer.\1.output.LayerNorm."),
    (r"^encoder\.pooler\.dense\.", "bert.pooler.dense."),
    (r"^transform\.dense\.", "cls.predictions.transform.dense."),
    (r"^transform\.norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^decoder\.bias$", "cls.predictions.bias"),
    (r"^classifier\.", "classifier."),
]


def _hf_name(key: str) -> str:
    for pattern, replacement in _HF_RENAMES:
        new, count = re.subn(pattern, replacement, key)
        if count:
            return new
    raise KeyError(f"no Hugging Face name for parameter {key!r}")


def _hf_config(config: ModelConfig, kind: str, num_labels: int | None) -> dict[str, Any]:
    hf: dict[str, Any] = {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM" if kind == "mlm" else "BertForSequenceClassification"],
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "intermediate_size": config.d_ff,
        "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
    if kind == "classification":
        hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        hf["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
        if num_labels == 1:
            hf["problem_type"] = "regression"
    return hf


def check_hf_bert(config: ModelConfig, where: str) -> None:
    """Raise ConfigError saying why a model of ``config`` has no Hugging Face BERT equivalent, if it has none:
    only MHA models with ``n_heads * head_dim == d_model``, learned positions and token types, and BERT's
    position numbering map."""
    if config.attention != "mha":
        raise ConfigError(f"{where}: attention={config.attention!r} cannot be exported to "
                          f"Hugging Face BERT, which has no such attention (only 'mha' maps)")
    if config.n_heads * config.head_dim != config.d_model:
        raise ConfigError(f"{where}: n_heads*head_dim={config.n_heads * config.head_dim} != "
                          f"d_model={config.d_model}; Hugging Face BERT requires them equal")
    if config.positions != "learned" or config.type_vocab_size == 0:
        raise ConfigError(f"{where}: positions={config.positions!r}, type_vocab_size={config.type_vocab_size} "
                          f"has no Hugging Face BERT equivalent, which has learned position and token-type tables")
    if config.position_offset != 0:
        raise ConfigError(f"{where}: position_offset={config.position_offset} (RoBERTa-style) "
                          f"has no Hugging Face BERT equivalent; only BERT numbering (0) exports")


def hf_bert(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights by Hugging Face name)`` of a BERT model (MLM or classifier) in
    Hugging Face BERT's layout, in memory: what :func:`export_hf` writes, and what the GPU check's
    ``transformers`` twin is built from (:mod:`leanlm.modeling.hf_twins`)."""
    config: ModelConfig = model.config
    check_hf_bert(config, where)
    # Hugging Face's tables have vocab_size rows: the padded ones (leanlm.modeling.vocab) stay behind.
    tensors, _ = _deduplicated_state(model, unpadded_state_dict(model))
    try:
        hf_tensors = {_hf_name(k): v for k, v in tensors.items() if k != "decoder.weight"}
    except KeyError as err:
        raise LeanLMError(f"{where}: {err.args[0]}; the exporter does not know this layer") from None
    return _hf_config(config, model_kind(model), getattr(model, "num_labels", None)), hf_tensors


def export_hf(directory: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the checkpoint in ``directory`` as a Hugging Face BERT model into ``out_dir``.

    Only models :func:`check_hf_bert` accepts have a Hugging Face equivalent; anything else raises
    ConfigError saying why.
    """
    directory, out_dir = Path(directory), Path(out_dir)
    meta = read_checkpoint_meta(directory)
    check_hf_bert(ModelConfig.from_dict(meta["model"], where=str(directory)), str(directory))
    model = load_model(directory, kind=meta["kind"])
    hf_config, hf_tensors = hf_bert(model, str(directory))
    with atomic_path(out_dir / WEIGHTS_NAME, suffix=".safetensors") as tmp:
        save_file(hf_tensors, str(tmp), metadata={"format": "pt"})
    write_json(out_dir / CONFIG_NAME, hf_config)
    return out_dir
