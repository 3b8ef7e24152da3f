"""Attention parameter counts of chapter 3's models at the thesis's own scale (params/paper.yaml).

The thesis's tables print #params for the attention of whole models (Tables 3.1-3.3, 3.14, 3.15).
Whatever profile is rendered, those printed numbers are checked against the *paper* profile's
models: each is built through :func:`leanlm.modeling.models.build_model` on PyTorch's ``meta``
device (shapes, no memory: a BERT-large costs nothing) and counted with
:func:`leanlm.modeling.counting.model_attention_parameters` (weights without biases, head
embeddings and output projections included; DESIGN §8). Nothing here is typed in.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.reporting.render import _paper_config, fmt_count, paper_config

# The head each backbone is pretrained with in chapter 3 (the attention is the same under every head).
PRETRAIN_HEAD = {"bert": "mlm", "gpt2": "causal_lm", "transformer": "seq2seq"}
# Any vocabulary will do: attention weights do not depend on it (BERT's WordPiece size, for realism).
COUNT_VOCAB = 30522


@dataclass(frozen=True)
class Count:
    """The attention weights of one model, and the number of attention sublayers they sit in."""

    size: str
    attention: str
    params: int
    blocks: int
    model: dict


def size_model(config: dict, size: str, attention: str) -> dict:
    """The model fields of size ``size`` with attention ``attention`` (as leanlm.runs.runs lays them out)."""
    if size not in config["models"]:
        raise LeanLMError(
            f"{config['_params_file']}: key models has no size {size!r}; sizes: {', '.join(config['models'])}"
        )
    fields = config["models"][size]
    backbone = fields.get("backbone", size)
    return {"backbone": backbone, "attention": attention,
            **{k: v for k, v in fields.items() if k not in ("backbone", "pretrain_overrides")}}


@contextmanager
def _fills_skipped():
    """In-place random/constant fills as no-ops, for building models on the meta device only.

    Meta tensors hold no data, so initialising them changes nothing, yet PyTorch runs Python
    reference kernels for normal_ and friends on them: skipping the fills makes a thesis-scale
    model count in a fraction of the time. Shapes, and so counts, are untouched. The methods are
    restored on exit, also after an error.
    """
    names = ("normal_", "uniform_", "zero_", "fill_")
    saved = {name: getattr(torch.Tensor, name) for name in names}
    try:
        for name in names:
            setattr(torch.Tensor, name, lambda self, *args, **kwargs: self)
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


@lru_cache(maxsize=256)
def _count(params_file: str, size: str, attention: str) -> Count:
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.counting import attention_blocks, model_attention_parameters
    from leanlm.modeling.models import build_model

    model_fields = size_model(_paper_config(params_file), size, attention)
    config = ModelConfig.from_dict({**model_fields, "vocab_size": COUNT_VOCAB})
    with torch.device("meta"), _fills_skipped():
        model = build_model(config, PRETRAIN_HEAD[config.backbone])
    return Count(size, attention, model_attention_parameters(model), len(attention_blocks(model)), model_fields)


def thesis_count(size: str, attention: str) -> Count:
    """Attention weights of the paper profile's model ``size`` with ``attention``, counted on meta."""
    paper_config()  # a clear error if params/paper.yaml is missing
    return _count(str(paths.params_dir() / "paper.yaml"), size, attention)


def printed_count_note(printed: str, count: int, what: str) -> str | None:
    """A footnote where the thesis's printed count is not ``count`` rounded as printed, else None.

    Table 3.1 prints MHA at BERT-base as 28.32M, while 12 x 4 x 768^2 = 28,311,552 (28.31M): the
    count is kept and the printed value shown with this note.
    """
    if not isinstance(printed, str) or printed in ("", "-") or fmt_count(count) == printed:
        return None
    return (f"The thesis prints {printed} for {what}; its attention weights at the thesis's scale "
            f"count {count:,} ({fmt_count(count)}).")
