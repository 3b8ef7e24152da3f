"""The encoder-decoder's data side (§3.4.4): the BPE tokenizer source and target share, the WMT-14 pairs as
token arrays, their batches and the validation loss. The translation objective and runner
(leanlm.objectives.translation) train and score with them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from leanlm.errors import ConfigError, DataError
from leanlm.io import atomic_path
from leanlm.modeling.seq2seq import BOS_ID, EOS_ID, IGNORE_INDEX, PAD_ID, UNK_ID
from leanlm.training.text_batches import example_indices, micro_batches_per_step, padded_dims

# Ids fixed by their order (the model's PAD_ID, UNK_ID, BOS_ID, EOS_ID).
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
assert [SPECIAL_TOKENS.index(t) for t in SPECIAL_TOKENS] == [PAD_ID, UNK_ID, BOS_ID, EOS_ID]
TOKENIZER_FILE = "tokenizer.json"
MAX_ALPHABET = 1000  # characters kept as BPE symbols; rarer ones become <unk>


# ------------------------------------------------------------------------------------- tokenizer
def _bpe_tokenizer(model: models.BPE) -> Tokenizer:
    # Metaspace marks word starts with "▁", so decoding restores the exact spacing: sacrebleu scores
    # detokenized text, and German punctuation/compounds survive the round trip.
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def train_bpe(texts: Callable[[], Iterable[str]], vocab_size: int) -> Tokenizer:
    """A BPE tokenizer of ``vocab_size`` entries trained on the texts ``texts()`` yields (read twice).

    Deterministic: the alphabet (the most frequent characters, ties by code point) is given to the
    trainer up front, so no tie between equally rare characters is decided by hash order; merges are
    then chosen by count with ties broken by symbol ids, which are fixed.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 16:
        raise ConfigError(f"pretrain.translation.vocab_size={vocab_size} is too small for a BPE vocabulary")
    scratch = _bpe_tokenizer(models.BPE(unk_token="<unk>"))
    counts: Counter[str] = Counter()
    for text in texts():
        counts.update(scratch.normalizer.normalize_str(text))
    for char in [c for c in counts if c.isspace()]:
        del counts[char]
    alphabet = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_ALPHABET]]
    alphabet.append("▁")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet), show_progress=False)
    scratch.train_from_iterator(texts(), trainer=trainer)
    return scratch


def save_bpe(tokenizer: Tokenizer, directory: Path) -> Path:
    path = Path(directory) / TOKENIZER_FILE
    with atomic_path(path, suffix=".json") as tmp:
        tokenizer.save(str(tmp))
    return path


def load_bpe(directory: Path) -> Tokenizer:
    path = Path(directory) / TOKENIZER_FILE
    if not path.is_file():
        raise DataError(f"{path} is missing: the translation model's tokenizer is saved beside it by "
                        f"`leanlm pretrain` (objective translation); run that first")
    tokenizer = Tokenizer.from_file(str(path))
    for index, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != index:
            raise DataError(f"{path}: {token} has id {tokenizer.token_to_id(token)}, not {index}; it is not a "
                            f"translation tokenizer of this pipeline")
    return tokenizer


def encode_texts(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [enc.ids for enc in tokenizer.encode_batch(texts, add_special_tokens=False)]


def decode_ids(tokenizer: Tokenizer, rows: torch.Tensor) -> list[str]:
    """Generated ids (B, L) -> text: cut at the first </s>, specials dropped."""
    out = []
    for ids in rows.tolist():
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        out.append(tokenizer.decode([i for i in ids if i > EOS_ID], skip_special_tokens=True).strip())
    return out


# ------------------------------------------------------------------------------------- batches
Pair = tuple[Sequence[int], Sequence[int]]  # (source ids + </s>, target ids)
ENCODE_CHUNK = 65536  # texts per encode_batch call: bounded memory at WMT scale (4.5M pairs)


class PairStore:
    """Encoded sentence pairs in flat int32 arrays with offsets: indexable like a list of pairs.

    A Python list of lists would cost ~50 bytes per token; WMT-14's 4.5M pairs hold ~280M tokens.
    """

    def __init__(self, sources: np.ndarray, source_offsets: np.ndarray, targets: np.ndarray,
                 target_offsets: np.ndarray):
        self.sources, self.source_offsets = sources, source_offsets
        self.targets, self.target_offsets = targets, target_offsets

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    def __getitem__(self, i: int) -> Pair:
        so, to = self.source_offsets, self.target_offsets
        return self.sources[so[i] : so[i + 1]], self.targets[to[i] : to[i + 1]]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _flat(chunks: list[list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    parts = [a for chunk in chunks for a in chunk]
    lengths = np.fromiter((len(a) for a in parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)
    return flat, offsets


def encode_pairs(tokenizer: Tokenizer, rows: list[dict], max_tokens: int) -> tuple[PairStore, int]:
    """(source + </s>, target) ids of each row; pairs with a side over ``max_tokens`` (</s> or <s>
    included) are skipped: truncating would teach translations that stop mid-sentence.
    Returns (pairs, number skipped)."""
    sources: list[list[np.ndarray]] = []
    targets: list[list[np.ndarray]] = []
    skipped = 0
    eos = np.array([EOS_ID], dtype=np.int32)
    for start in range(0, len(rows), ENCODE_CHUNK):
        chunk = rows[start : start + ENCODE_CHUNK]
        src_ids = encode_texts(tokenizer, [r["source"] for r in chunk])
        tgt_ids = encode_texts(tokenizer, [r["target"] for r in chunk])
        kept_src, kept_tgt = [], []
        for src, tgt in zip(src_ids, tgt_ids):
            if not src or not tgt or len(src) + 1 > max_tokens or len(tgt) + 1 > max_tokens:
                skipped += 1
                continue
            kept_src.append(np.concatenate([np.asarray(src, dtype=np.int32), eos]))
            kept_tgt.append(np.asarray(tgt, dtype=np.int32))
        sources.append(kept_src)
        targets.append(kept_tgt)
    return PairStore(*_flat(sources), *_flat(targets)), skipped


def collate_pairs(pairs: list[Pair], pad_id: int = PAD_ID) -> dict[str, torch.Tensor]:
    """Padded batch: input_ids/attention_mask (source), decoder_input_ids (<s> + target) and labels
    (target + </s>, -100 on padding)."""
    src_len = max(len(s) for s, _ in pairs)
    tgt_len = max(len(t) for _, t in pairs) + 1
    input_ids = np.full((len(pairs), src_len), pad_id, dtype=np.int64)
    mask = np.zeros((len(pairs), src_len), dtype=np.int64)
    decoder_input_ids = np.full((len(pairs), tgt_len), pad_id, dtype=np.int64)
    labels = np.full((len(pairs), tgt_len), IGNORE_INDEX, dtype=np.int64)
    for row, (src, tgt) in enumerate(pairs):
        input_ids[row, : len(src)] = src
        mask[row, : len(src)] = 1
        decoder_input_ids[row, 0] = BOS_ID
        decoder_input_ids[row, 1 : len(tgt) + 1] = tgt
        labels[row, : len(tgt)] = tgt
        labels[row, len(tgt)] = EOS_ID
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
            "decoder_input_ids": torch.from_numpy(decoder_input_ids), "labels": torch.from_numpy(labels)}


class TranslationBatches:
    """``batch_at(step, micro)``: sentence pairs from per-epoch seeded shuffles (random access, so a
    resumed run sees exactly the batches the killed one would have)."""

    def __init__(self, pairs: PairStore | list[Pair], batch_size: int, grad_accum: int, seed: int):
        self.pairs, self.batch_size, self.seed = pairs, batch_size, seed
        self.per_step = micro_batches_per_step(grad_accum)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        idx = example_indices(len(self.pairs), self.seed, start, self.batch_size).tolist()
        return collate_pairs([self.pairs[i] for i in idx])

    def varying_dims(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
        """The source and target lengths (each padded to its longest): compiled as symbols
        (leanlm.training.compiling)."""
        return padded_dims(batch)


@torch.no_grad()
def validation_loss(model, pairs: PairStore | list[Pair], batch_size: int) -> float:
    """Mean cross-entropy per target token (no label smoothing), </s> included."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = [pairs[i] for i in range(start, min(start + batch_size, len(pairs)))]
        batch = {k: v.to(device) for k, v in collate_pairs(chunk).items()}
        labels = batch.pop("labels")
        logits = model(**batch)["logits"].float()
        total += float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                       reduction="sum"))
        count += int((labels != IGNORE_INDEX).sum())
    model.train()
    return total / max(count, 1)


# ------------------------------------------------------------------------------------- objective
