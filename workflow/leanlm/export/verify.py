"""The export's own check before it is published: ``transformers`` loads the written files and computes
the leanlm model's logits on a batch, or nothing is published (leanlm.export.hf)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from leanlm.errors import LeanLMError

# fp32 on the CPU: the two implementations differ by float rounding only (fused vs separate matmuls).
ATOL = RTOL = 1e-4
BATCH, LENGTH = 2, 8


def probe_batch(config) -> dict[str, torch.Tensor]:
    """A fixed batch of real ids (never the pad id: GPT-2's classifier finds each row's last token by it)."""
    g = torch.Generator().manual_seed(0)
    length = min(LENGTH, config.max_position - config.position_offset)
    ids = torch.randint(0, config.vocab_size, (BATCH, length), generator=g)
    ids[ids == config.pad_token_id] = (config.pad_token_id + 1) % config.vocab_size
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if config.n_decoder_layers:  # the encoder-decoder: a target prefix (<s> + tokens) beside the source
        batch["decoder_input_ids"] = torch.randint(0, config.vocab_size, (BATCH, length), generator=g)
    if config.backbone == "bert":
        types = torch.zeros_like(ids)
        types[:, length // 2:] = min(1, config.type_vocab_size - 1)
        batch["token_type_ids"] = types
    return batch


def load_export(directory: Path, cls: str) -> nn.Module:
    """The export in ``directory`` as transformers loads it: its stock class ``cls``, or the ``Auto*`` class
    its config.json's ``auto_map`` points at ``cls`` with (its own code, ``trust_remote_code``)."""
    import transformers

    if hasattr(transformers, cls):
        return getattr(transformers, cls).from_pretrained(str(directory))
    auto = json.loads((directory / "config.json").read_text(encoding="utf-8"))["auto_map"]
    loader = next(name for name, target in auto.items() if target.endswith(f".{cls}"))
    return getattr(transformers, loader).from_pretrained(str(directory), trust_remote_code=True)


@torch.no_grad()
def check_written(model: nn.Module, directory: Path, cls: str, where: str,
                  batches: list[tuple[dict, dict]] | None = None) -> float:
    """Load ``directory`` as transformers' ``cls`` and compare its logits with ``model``'s; returns the
    largest difference, LeanLMError when it is beyond float rounding. ``batches``: ``(leanlm's batch, the
    export's batch)`` of the same texts (a hash embedding's, each encoded by its own tokenizer); default one
    batch of ids (:func:`probe_batch`) for both."""
    hf = load_export(directory, cls).float().eval()
    model = model.float().eval()
    if batches is None:
        batch = probe_batch(model.config)
        batches = [(batch, batch)]
    return max(_compare(model(**ours)["logits"], hf(**theirs).logits, cls, where) for ours, theirs in batches)


def _compare(ours: torch.Tensor, theirs: torch.Tensor, cls: str, where: str) -> float:
    if theirs.shape != ours.shape:
        raise LeanLMError(f"{where}: transformers' {cls} gives logits of shape {tuple(theirs.shape)}, leanlm "
                          f"{tuple(ours.shape)}; nothing was written")
    diff = float((theirs - ours).abs().max())
    if not torch.allclose(theirs, ours, atol=ATOL, rtol=RTOL):
        raise LeanLMError(f"{where}: transformers' {cls} loaded from the export computes other logits than "
                          f"leanlm (largest difference {diff:.3g}); the layout map is wrong, nothing was written")
    return diff
