"""The ``hub`` pretraining objective: an off-the-shelf pretrained checkpoint (CANINE-C, ch. 2).

The thesis fine-tunes "the off-the-shelf CANINE-C from https://huggingface.co/google/canine-c"
(§2.4.1, footnote 6). Its run (``objective: hub``, ``hub_checkpoint: google/canine-c``,
``requires_hub``: see :func:`leanlm.runs.absent_runs`) has a pretrain job that loads the checkpoint
through ``transformers`` and saves it in the run's model directory (Hugging Face layout:
``config.json`` + ``model.safetensors``, the pretrain rule's outputs), and a pretrain.json with no
pretraining time. Fine-tuning then runs through the ordinary GLUE runner:

- :func:`load_finetune_model` / :func:`load_pretrained_model` read either checkpoint format (leanlm's
  or Hugging Face's) from a model directory; a Hugging Face one becomes
  ``AutoModelForSequenceClassification``, whose output (loss, logits) the engine and ``predict`` read
  like our models';
- :class:`CharTokenizer` encodes task text as CANINE does: Unicode code points, [CLS] = U+E000,
  [SEP] = U+E001, padding 0. ``max_seq_len`` counts subword tokens elsewhere; CANINE gets
  ``CHARS_PER_TOKEN`` (its downsampling rate, 4) characters per token, so its deep transformer sees
  as many positions as a subword model, capped at its own 2048-character maximum.

``hub_checkpoint`` may also name a local directory holding a Hugging Face checkpoint (a mirror, or
the tests' tiny random CANINE); then the hub is not contacted.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from torch import nn

from leanlm import paths
from leanlm.errors import ConfigError, DataError, TrainingError
from leanlm.io import write_json
from leanlm.modeling.checkpoint import CONFIG_NAME, FORMAT, WEIGHTS_NAME, load_model
from leanlm.modeling.counting import total_parameters
from leanlm.provenance import hardware
from leanlm.training.hash_inputs import Encoding, assemble
from leanlm.training.pretrain import OBJECTIVES, PretrainObjective, record_head

CLS, SEP, MASK, PAD = 0xE000, 0xE001, 0xE003, 0
CHARS_PER_TOKEN = 4
MAX_CHARS = 2048


class CharTokenizer:
    """CANINE's input: one id per Unicode code point (the ``tokenizers`` methods the pipeline calls)."""

    specials = {"[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK, "[PAD]": PAD}

    def __init__(self):
        self.max_length: int | None = None

    def enable_truncation(self, max_length: int, **_: object) -> None:
        self.max_length = min(MAX_CHARS, CHARS_PER_TOKEN * int(max_length))

    def no_truncation(self) -> None:
        self.max_length = None

    def no_padding(self) -> None:
        pass

    def token_to_id(self, token: str) -> int | None:
        return self.specials.get(token)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return 0x110000  # every code point

    def encode_batch(self, inputs, add_special_tokens: bool = True) -> list[Encoding]:
        out = []
        for item in inputs:
            a, b = (item, None) if isinstance(item, str) else item
            out.append(assemble([ord(c) for c in a], None if b is None else [ord(c) for c in b],
                                CLS, SEP, self.max_length, add_special_tokens))
        return out


def _is_leanlm(directory: Path) -> bool:
    import json

    path = directory / CONFIG_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError) as err:
        raise TrainingError(f"{path} is unreadable ({err}); re-run the pretrain job of {directory.name}") from None


def load_finetune_model(directory: str | os.PathLike, num_labels: int) -> nn.Module:
    """The fine-tuning start in ``directory``: a leanlm checkpoint as a classifier (the pretrained
    backbone taken over), or a Hugging Face checkpoint through AutoModelForSequenceClassification."""
    directory = Path(directory)
    if _is_leanlm(directory):
        return load_model(directory, kind="classification", num_labels=num_labels)
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(str(directory), num_labels=num_labels)


def load_pretrained_model(directory: str | os.PathLike) -> nn.Module:
    """The model saved in ``directory`` as it was saved (either format)."""
    directory = Path(directory)
    if _is_leanlm(directory):
        return load_model(directory)
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(directory))


def hash_embedding_parameters(model: nn.Module) -> int:
    """CANINE's hash embeddings (Appendix 2.8: buckets x d; the code-point embedders), else 0."""
    return sum(p.numel() for name, p in model.named_parameters() if "HashBucketCodepointEmbedder" in name)


@OBJECTIVES.register("hub")
class HubCheckpoint(PretrainObjective):
    """Save the run's ``hub_checkpoint`` as its pretrained model (no training here)."""

    def run(self, config: dict, run) -> dict:
        if not run.hub_checkpoint:
            raise ConfigError(f"{config['_params_file']}: run {run.run_id} has objective hub but no "
                              f"hub_checkpoint (e.g. google/canine-c)")
        profile = config["profile"]
        source = run.hub_checkpoint
        load_from = source
        if not Path(source).is_dir():
            from leanlm.data.hub import ensure_hub_reachable
            from leanlm.data.mirror import mirrored_model

            load_from = mirrored_model(source, profile)  # the hub mirror's copy, when one is set
            if load_from is None:
                ensure_hub_reachable(f"checkpoint {source}", profile)
                load_from = source
        from transformers import AutoModel

        try:
            model = AutoModel.from_pretrained(str(load_from))
        except Exception as err:  # transformers raises OSError/ValueError/HTTP errors
            raise DataError(f"run {run.run_id}: could not load hub checkpoint {source!r}: {err}") from err
        out_dir = paths.models_dir(profile) / run.run_id
        out_dir.mkdir(parents=True, exist_ok=True)
        # save_pretrained writes in place; write beside and move, weights first (as save_checkpoint).
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".hub-") as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            for name in (WEIGHTS_NAME, CONFIG_NAME):
                os.replace(Path(tmp) / name, out_dir / name)
        record = {
            **record_head(config, run, model.config.to_dict(), {}, hub_checkpoint=source),
            "summary": {"steps": 0, "pretrained": "hub"},
            "history": [],
            "validation": {},
            "parameters": {"total": total_parameters(model), "attention": None, "embedding": None,
                           "word_embedding": hash_embedding_parameters(model)},
            "timing": {"seconds": 0.0, "seconds_per_sample": None},
            "hardware": hardware(),
        }
        write_json(paths.results_dir(profile) / "runs" / run.run_id / "pretrain.json", record)
        return record
