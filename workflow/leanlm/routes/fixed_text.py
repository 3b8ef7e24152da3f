"""Ch. 4's input route: the subword route's ids, and FixedSeqQK's fixed text (§4.3.4, DESIGN §8): the first
``max_position`` tokens of one held-out document. Every Qwen run takes it (:func:`leanlm.plugins.route_name`);
it attaches the text only to a model that reads one (:func:`needs_fixed_text`).

The thesis takes "the first 2048 tokens from FineWeb-10BT", a text the model is not pretrained on. The
corpus it comes from is the run's ``fixed_text_corpus`` (an experiment's ``pretrain_data.fixed_text``,
resolved by :func:`leanlm.runs.runs`): in the paper profile ``data.corpora.fineweb``, the first
documents of FineWeb's sample-10BT streamed by the corpora stage; in profiles that define no named
corpora (smoke, offline) it is the run's own pretraining corpus. :func:`leanlm.data.pretrain_data.run_data`
gives its directory (``RunData.fixed_text_dir``).

The document is the first of that corpus's validation split (corpus order, so the choice is fixed by
the corpus stage) with at least ``max_position`` tokens, tokenised with the run's tokenizer without
special tokens; when no single document is long enough (a tiny corpus), the validation documents are
joined in order until there are. :func:`attach_fixed_sequence` sets it on the model before pretraining
(``QwenForCausalLM.set_fixed_sequence``) and returns what pretrain.json records (the corpus, file and
doc_ids used); the ids live in the model's ``fixed_token_ids`` buffer, so the checkpoint carries them and
every later evaluation reuses exactly this text.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import read_jsonl
from leanlm.routes.subword import SubwordRoute

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


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(paths.project_root()))
    except ValueError:
        return str(path)


def attach_fixed_sequence(model: nn.Module, tokenizer, corpus_dir: Path, corpus: str = "") -> dict | None:
    """Give a FixedSeqQK model its fixed text from ``corpus_dir``'s validation split; None (nothing done)
    for every other model. ``corpus`` names that corpus in the returned record (e.g. ``fineweb``)."""
    if not needs_fixed_text(model):
        return None
    path = Path(corpus_dir) / FIXED_TEXT_SPLIT
    if not path.is_file():
        raise DataError(f"{path} is missing: FixedSeqQK's fixed text is a held-out document of corpus "
                        f"{corpus or corpus_dir}; run the corpus stage that writes it")
    length = model.config.max_position
    ids, doc_ids = fixed_sequence_ids(tokenizer, read_jsonl(path), length)
    model.set_fixed_sequence(ids)
    return {"corpus": corpus or _shown(Path(corpus_dir)), "file": _shown(path), "split": "validation",
            "doc_ids": doc_ids, "tokens": length}


class FixedTextRoute(SubwordRoute):
    name = "fixed_text"

    def prepare_model(self, model, tokenizer, data, profile: str) -> dict:
        fixed_text = attach_fixed_sequence(model, tokenizer, data.fixed_text_dir, data.fixed_text_corpus(profile))
        return {"fixed_sequence": fixed_text} if fixed_text else {}


Route = FixedTextRoute
