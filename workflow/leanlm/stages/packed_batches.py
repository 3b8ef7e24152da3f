"""The packed corpus as an objective's batches: :class:`PackedBatches` (random access to the seeded per-epoch
shuffle of full-length rows) and its MLM and causal-LM forms, how a tokenizer's documents are packed into rows
(:func:`pack_rows`: [CLS]/[SEP] or end-of-text), and the validation loss every packed objective reports. Used by
:mod:`leanlm.stages.pretrain` and the objectives of :mod:`leanlm.objectives`; the benchmarks and the GPU check
build the same batches."""

from __future__ import annotations

import abc

import torch

from leanlm.data.tokenizer import eos_token_id, special_token_id
from leanlm.errors import DataError
from leanlm.modeling.heads import labelled_positions
from leanlm.modeling.models import loss_only_kwargs
from leanlm.training.eos_packing import eos_packed_rows, sep_packed_rows, streamable
from leanlm.training.objectives import mlm_mask
from leanlm.training.seeding import step_generator
from leanlm.training.text_batches import example_indices, micro_batches_per_step

IGNORE_INDEX = -100


def special_token_ids(tokenizer) -> list[int]:
    """Ids of the special tokens the tokenizer has (by role: BERT's [PAD] ... or RoBERTa's <pad> ...),
    which the objectives never corrupt."""
    return [i for i in (special_token_id(tokenizer, role) for role in ("pad", "cls", "sep", "unk", "mask"))
            if i is not None]


class PackedBatches(abc.ABC):
    """``batch_at(step, micro)`` over packed sequences: the micro-batch's rows of the seeded per-epoch
    shuffle (random access, see text_batches), turned into inputs and labels by the objective's
    :meth:`masked`, which :func:`validation_loss` also calls on fixed rows. Packed rows are full, so the
    batches carry no ``attention_mask`` (the models treat a missing mask as no padding, without asking
    the device whether an all-ones mask is all ones)."""

    uses_generator = True  # whether masked() draws random numbers (a per-(step, micro) generator)

    def __init__(self, sequences, batch_size: int, grad_accum: int, seed: int):
        self.sequences, self.batch_size, self.seed = sequences, batch_size, seed
        self.per_step = micro_batches_per_step(grad_accum)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        return self.masked(*self.rows_at(step, micro))

    def rows_at(self, step: int, micro: int) -> tuple[torch.Tensor, torch.Generator | None]:
        """The micro-batch's rows and the generator its draws come from (None where nothing is drawn)."""
        start = (step * self.per_step + micro) * self.batch_size
        rows = self.sequences[example_indices(len(self.sequences), self.seed, start, self.batch_size)]
        return rows, step_generator(self.seed, step, micro) if self.uses_generator else None

    @abc.abstractmethod
    def masked(self, rows: torch.Tensor, generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        """The model's batch (input_ids, labels, and what else the head reads) for these rows."""


class MLMBatches(PackedBatches):
    """BERT's masked language modelling over packed sequences."""

    def __init__(self, sequences: torch.Tensor, special_ids: list[int], mask_id: int, vocab_size: int,
                 batch_size: int, grad_accum: int, mask_prob: float, seed: int):
        super().__init__(sequences, batch_size, grad_accum, seed)
        self.special = torch.tensor(sorted(special_ids), dtype=torch.long)
        self.mask_id, self.vocab_size, self.mask_prob = mask_id, vocab_size, mask_prob

    def masked(self, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        special_mask = torch.isin(rows, self.special)
        inputs, labels = mlm_mask(rows, special_mask, self.mask_id, self.vocab_size, self.mask_prob, generator)
        # No attention_mask: packed rows have no padding, and an all-ones mask would make the model ask the
        # device whether it is all ones. The labelled positions are counted here, on the CPU, for the same
        # reason (BertForMLM's masked_positions).
        return {"input_ids": inputs, "labels": labels, "masked_positions": labelled_positions(labels)}

    def varying_dims(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
        """The number of masked positions differs from batch to batch (the rows are full): compiled as a
        symbol (leanlm.training.compiling)."""
        return {"masked_positions": (0,)}


class CausalLMBatches(PackedBatches):
    """Next-token prediction over packed sequences (the model shifts): nothing is masked."""

    uses_generator = False

    def masked(self, rows: torch.Tensor, generator) -> dict[str, torch.Tensor]:
        return {"input_ids": rows, "labels": rows.clone()}  # packed rows: no padding, no attention_mask


def uses_eos_packing(tokenizer) -> bool:
    """True for a tokenizer without a cls/sep pair ([CLS]/[SEP], RoBERTa's <s>/</s>; Pythia's BPE has
    neither): documents are separated by its EOS."""
    return special_token_id(tokenizer, "cls") is None or special_token_id(tokenizer, "sep") is None


def pack_rows(tokenizer, path, seq_len: int, desc: str):
    """The documents of ``path`` as (N, seq_len) packed rows, memory-mapped: end-of-text separated for a
    tokenizer without [CLS]/[SEP], else [CLS] ... [SEP] rows."""
    if uses_eos_packing(tokenizer):
        eos = eos_token_id(tokenizer)
        if eos is None:
            raise DataError(f"{desc}: the tokenizer has neither [CLS]/[SEP] nor an end-of-text token to separate "
                            f"the documents of {path} with")
        return eos_packed_rows(tokenizer, path, seq_len, eos, desc)  # (N, seq_len) rows, memory-mapped
    cls_id, sep_id = special_token_id(tokenizer, "cls"), special_token_id(tokenizer, "sep")
    if not streamable(tokenizer):  # ch. 2's codebook tokenizers pack through codebook_streams instead
        raise DataError(f"{desc}: {type(tokenizer).__name__} cannot key a cached token stream of {path}; hash "
                        f"runs pack with leanlm.hashing.codebook_streams.codebook_corpus")
    # `d1 SEP d2 ...` memory-mapped, cached across jobs; [CLS]/[SEP] added per row read
    return sep_packed_rows(tokenizer, path, seq_len, cls_id, sep_id, desc)


@torch.no_grad()
def validation_loss(model, batches: PackedBatches, sequences: torch.Tensor, device, max_rows: int = 512) -> float:
    """Mean loss per predicted token on the validation split, with fixed masks where the objective
    masks (so it is comparable across runs of a profile)."""
    model.eval()
    total, count = 0.0, 0
    rows = sequences[:max_rows]
    generator = torch.Generator().manual_seed(12345)
    for start in range(0, len(rows), batches.batch_size):
        batch = batches.masked(rows[start : start + batches.batch_size], generator)
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch["labels"]
        # Causal LM predicts every token but the first of each row; MLM only the masked ones.
        n = labels[:, 1:].numel() if isinstance(batches, CausalLMBatches) else int((labels != IGNORE_INDEX).sum())
        if n:  # the loss alone: the LM heads then compute it without holding the whole logits
            total += float(model(**batch, **loss_only_kwargs(model))["loss"]) * n
            count += n
    model.train()
    return total / max(count, 1)
