"""FixedSeqQK's fixed text (§4.3.4, DESIGN §8): the first ``max_position`` tokens of one held-out document.

The thesis takes the first 2048 tokens of a FineWeb sample-10BT document, a text the model is not
pretrained on. Here the document is the first of the corpus's validation split (corpus order, so the
choice is fixed by the corpus stage) with at least ``max_position`` tokens, tokenised without special
tokens; when no single document is long enough (a tiny corpus), the validation documents are joined in
order until there are. :func:`attach_fixed_sequence` sets it on the model before pretraining
(``QwenForCausalLM.set_fixed_sequence``); the ids live in the model's ``fixed_token_ids`` buffer, so the
checkpoint carries them and every later evaluation reuses exactly this text.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from leanlm.errors import DataError
from leanlm.io import read_jsonl

FIXED_TEXT_SPLIT = "validation.jsonl"


def fixed_sequence_ids(tokenizer, documents: list[dict], length: int) -> tuple[torch.Tensor, list[str]]:
    """``length`` token ids and the doc_ids they come from (see the module docstring)."""
    joined: list[int] = []
    used: list[str] = []
    for doc in documents:
        ids = tokenizer.encode(doc["text"], add_special_tokens=False).ids
        if len(ids) >= length:
            return torch.tensor(ids[:length], dtype=torch.long), [doc.get("doc_id", "?")]
        if len(joined) < length:
            joined.extend(ids)
            used.append(doc.get("doc_id", "?"))
    if len(joined) < length:
        raise DataError(f"the held-out documents give {len(joined)} tokens; FixedSeqQK needs a fixed text of "
                        f"{length} (max_position) tokens: use a larger corpus or a smaller max_position")
    return torch.tensor(joined[:length], dtype=torch.long), used


def needs_fixed_text(model: nn.Module) -> bool:
    return getattr(getattr(model, "model", None), "qk_stream", None) == "text"


def attach_fixed_sequence(model: nn.Module, tokenizer, corpus_dir: Path) -> dict | None:
    """Give a FixedSeqQK model its fixed text; None (nothing done) for every other model."""
    if not needs_fixed_text(model):
        return None
    path = Path(corpus_dir) / FIXED_TEXT_SPLIT
    if not path.is_file():
        raise DataError(f"{path} is missing: FixedSeqQK's fixed text is a held-out document; run the corpus stage")
    length = model.config.max_position
    ids, doc_ids = fixed_sequence_ids(tokenizer, read_jsonl(path), length)
    model.set_fixed_sequence(ids)
    return {"split": f"corpus/{FIXED_TEXT_SPLIT}", "doc_ids": doc_ids, "tokens": length}
