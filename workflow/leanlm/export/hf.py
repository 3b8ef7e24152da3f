"""``leanlm export-hf CHECKPOINT OUT``: a leanlm checkpoint as a ``transformers`` model directory.

OUT gets ``config.json`` and ``model.safetensors`` in the stock class's layout
(:mod:`leanlm.modeling.hf_layout`), or, for a model no stock class computes, in the layout of leanlm's own
self-contained class with its code beside them (``trust_remote_code``, :mod:`leanlm.export.remote`), and
the run's tokenizer (:mod:`leanlm.export.tokenizer`), or, for a ch. 2 hash embedding, the tokenizer that
computes its inputs from text (:mod:`leanlm.export.remote.hash_inputs`). Nothing is ever written wrong:

1. every config field is checked against what the class can express, before any file is written;
2. the files go into a temporary folder beside OUT, which transformers loads back and whose logits must
   equal leanlm's (:mod:`leanlm.export.verify`);
3. only then is the folder renamed to OUT (one rename: OUT is absent or complete). An OUT that exists
   and is not empty is refused rather than mixed with.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from leanlm.errors import ConfigError
from leanlm.export.tokenizer import check_fits, run_tokenizer, special_tokens, write_tokenizer
from leanlm.export.verify import check_written
from leanlm.io import write_json
from leanlm.modeling.checkpoint import CONFIG_NAME, WEIGHTS_NAME, load_model, read_checkpoint_meta
from leanlm.modeling.config import ModelConfig
from leanlm.export.remote import REMOTE_TARGETS
from leanlm.export.remote.files import copy_code
from leanlm.export.remote.hash_inputs import probe_batches, reads_features, write_hash_inputs
from leanlm.export.remote.seq2seq import translation_tokenizer
from leanlm.modeling.hf_layout import target_of
from leanlm.modeling.hf_layout.fields import Target, check_fields, export_kind


def export_target(config: ModelConfig, kind: str, where: str) -> tuple[Target, str]:
    """The stock class a ``kind`` model of ``config`` exports to, else the self-contained class of its
    backbone (leanlm.export.remote); ConfigError from the most capable one that refuses it."""
    try:
        return target_of(config, kind, where)
    except ConfigError:
        remote = REMOTE_TARGETS.get(config.backbone)
        if remote is None:
            raise
    return remote, check_fields(config, remote, kind, where)


def _free(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty folder; remove it or choose another "
                          f"output folder (the export never writes into an existing one)")


def export_hf(checkpoint: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the checkpoint in ``checkpoint`` into ``out`` as a ``transformers`` model with its tokenizer;
    ConfigError (nothing written) for a model without a stock class or a field the class cannot express."""
    checkpoint, out = Path(checkpoint), Path(out)
    where = str(checkpoint)
    meta = read_checkpoint_meta(checkpoint)
    config = ModelConfig.from_dict(meta["model"], where=f"{checkpoint / CONFIG_NAME}: model")
    # The kind first (the backbone or head may refuse by itself), then with the head the weights tell
    # (Shuffle+Random's two heads are two classes): export_kind.
    export_target(config, meta["kind"], where)
    model = load_model(checkpoint, kind=meta["kind"]).float().eval()
    _target, cls = export_target(config, export_kind(model), where)
    _free(out)
    hashed = reads_features(config)  # its inputs are hashes of the text, not a subword tokenizer's ids
    if not hashed:
        tokenizer, source = run_tokenizer(checkpoint, meta)
        check_fits(tokenizer, config.vocab_size, source)

    hf_config, tensors = _target.build(model, where)
    specials = {} if hashed else special_tokens(tokenizer)
    if config.backbone == "transformer":  # the translation BPE: a text ends with </s>, the target starts with <s>
        tokenizer, specials = translation_tokenizer(tokenizer, where)
    for role in ("bos", "eos"):
        if f"{role}_token" in specials:
            hf_config[f"{role}_token_id"] = tokenizer.token_to_id(specials[f"{role}_token"])
    # Where the files came from: the checkpoint and the SHA-256 of its weights (transformers keeps unknown keys).
    hf_config["leanlm"] = {"checkpoint": where, "kind": meta["kind"],
                           "weights_sha256": (meta.get("sha256") or {}).get(WEIGHTS_NAME),
                           **{k: v for k, v in (meta.get("extra") or {}).items() if k in ("run_id", "profile")}}

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        save_file(tensors, str(staging / WEIGHTS_NAME), metadata={"format": "pt"})
        write_json(staging / CONFIG_NAME, hf_config)
        max_length = config.max_position - config.position_offset
        copy_code(_target.code, staging)
        if hashed:
            ours = write_hash_inputs(checkpoint, meta, config, staging, max_length, where)
            check_written(model, staging, cls, where, probe_batches(ours, config, staging))
        else:
            write_tokenizer(tokenizer, staging, max_length, config.backbone == "bert" and config.type_vocab_size > 0,
                            specials)
            check_written(model, staging, cls, where)
        _free(out)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
