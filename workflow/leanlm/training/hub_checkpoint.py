"""Off-the-shelf pretrained checkpoints (CANINE-C, ch. 2): loading them, and encoding text as CANINE does.

The thesis fine-tunes "the off-the-shelf CANINE-C from https://huggingface.co/google/canine-c"
(§2.4.1, footnote 6). Its run (``objective: hub``, ``hub_checkpoint: google/canine-c``,
``requires_hub``: see :func:`leanlm.runs.absent_runs`) has a pretrain job (:mod:`leanlm.objectives.hub`) that loads the checkpoint
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
from pathlib import Path

from torch import nn

from leanlm.errors import TrainingError
from leanlm.modeling.checkpoint import CONFIG_NAME, FORMAT, load_model
from leanlm.training.encoding import Encoding, assemble

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


# The attention of the hub architectures the matrix fine-tunes: standard multi-head self-attention (CANINE's
# deep transformer is BERT's encoder). Another model type is labelled by its type.
HUB_ATTENTION = {"canine": "mha", "bert": "mha", "roberta": "mha"}


def model_record(model: nn.Module, run) -> dict:
    """The ``model`` entry of a results JSON: our model's own config (what Table 2.2 rebuilds to count it),
    a hub checkpoint's :func:`hub_model_record`, or the matrix's settings for a model with no config."""
    from leanlm.modeling.config import ModelConfig

    config = getattr(model, "config", None)
    if isinstance(config, ModelConfig):
        return config.to_dict()
    return hub_model_record(model, run) if config is not None else dict(run.model)


def hub_model_record(model: nn.Module, run) -> dict:
    """A hub checkpoint's entry under a results JSON's ``model`` key.

    The aggregation and the tables read our model columns (backbone, attention, layers, width, heads); a
    hub config has none of them (the rehearsal's aggregation stopped at "no key model.attention" on
    CANINE-C's record), so they are taken from the checkpoint's own config, which is kept whole under
    ``hub_config``. The backbone is the experiment's (CANINE-C stands beside ch. 2's BERT encoders).
    """
    hub = model.config.to_dict()
    d_model, heads = hub.get("hidden_size") or 0, hub.get("num_attention_heads") or 0
    model_type = str(hub.get("model_type", "hub"))
    return {"backbone": run.model.get("backbone", "bert"), "attention": HUB_ATTENTION.get(model_type, model_type),
            "embedding": model_type, "n_layers": hub.get("num_hidden_layers") or 0, "d_model": d_model,
            "n_heads": heads, "head_dim": d_model // heads if heads else 0, "d_ff": hub.get("intermediate_size") or 0,
            "hub_checkpoint": run.hub_checkpoint, "hub_config": hub}


def hash_embedding_parameters(model: nn.Module) -> int:
    """CANINE's hash embeddings (Appendix 2.8: buckets x d; the code-point embedders), else 0."""
    return sum(p.numel() for name, p in model.named_parameters() if "HashBucketCodepointEmbedder" in name)
