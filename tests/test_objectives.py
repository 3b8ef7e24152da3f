"""MLM masking (BERT's 15% with 80/10/10) and sequence packing."""

import pytest
import torch

from leanlm.errors import ConfigError, DataError
from leanlm.training.objectives import IGNORE_INDEX, mlm_mask, pack_sequences, special_tokens_mask
from leanlm.training.seeding import step_generator

PAD, CLS, SEP, MASK, VOCAB = 0, 1, 2, 3, 1000


def _batch(rows=400, cols=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, VOCAB, (rows, cols), generator=gen)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[: rows // 2, cols // 2 :] = PAD  # half the rows padded at the end
    return ids


def test_masking_rates_follow_bert():
    ids = _batch()
    special = special_tokens_mask(ids, [PAD, CLS, SEP, MASK])
    inputs, labels = mlm_mask(ids, special, MASK, VOCAB, 0.15, torch.Generator().manual_seed(1))
    chosen = labels != IGNORE_INDEX
    eligible = int((~special).sum())
    n = int(chosen.sum())
    assert n / eligible == pytest.approx(0.15, abs=0.005)  # ~38k eligible tokens
    assert torch.equal(labels[chosen], ids[chosen])  # labels are the original tokens
    masked = (inputs == MASK) & chosen
    unchanged = (inputs == ids) & chosen
    randomised = chosen & ~masked & ~unchanged
    assert int(masked.sum()) / n == pytest.approx(0.8, abs=0.02)
    # a random draw can hit the original token (1/VOCAB), so "unchanged" is slightly above 10%
    assert int(unchanged.sum()) / n == pytest.approx(0.1, abs=0.015)
    assert int(randomised.sum()) / n == pytest.approx(0.1, abs=0.015)
    assert torch.equal(inputs[~chosen], ids[~chosen])  # nothing else is touched


def test_special_tokens_and_padding_are_never_masked():
    ids = _batch(rows=64, cols=32)
    special = special_tokens_mask(ids, [PAD, CLS, SEP])
    inputs, labels = mlm_mask(ids, special, MASK, VOCAB, 0.9, torch.Generator().manual_seed(3))
    assert (labels[special] == IGNORE_INDEX).all()
    assert torch.equal(inputs[special], ids[special])
    assert (labels[~special] != IGNORE_INDEX).float().mean() > 0.85  # high rate: really masking


def test_masking_is_determined_by_the_generator():
    ids = _batch(rows=16, cols=64)
    special = special_tokens_mask(ids, [PAD, CLS, SEP])
    a = mlm_mask(ids, special, MASK, VOCAB, 0.15, step_generator(7, 120, 1))
    b = mlm_mask(ids, special, MASK, VOCAB, 0.15, step_generator(7, 120, 1))
    c = mlm_mask(ids, special, MASK, VOCAB, 0.15, step_generator(7, 120, 2))
    d = mlm_mask(ids, special, MASK, VOCAB, 0.15, step_generator(8, 119, 1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1]) and not torch.equal(a[1], d[1])


def test_at_least_one_position_is_masked():
    ids = torch.tensor([[CLS, 11, 12, SEP]])
    special = special_tokens_mask(ids, [CLS, SEP])
    for seed in range(20):  # with p=0.01 nearly every draw chooses nothing
        _, labels = mlm_mask(ids, special, MASK, VOCAB, 0.01, torch.Generator().manual_seed(seed))
        assert int((labels != IGNORE_INDEX).sum()) >= 1
        assert (labels[special] == IGNORE_INDEX).all()


def test_mask_arguments_are_checked():
    ids = _batch(rows=2, cols=8)
    with pytest.raises(DataError, match="same shape"):
        mlm_mask(ids, ids[:, :4] == PAD, MASK, VOCAB, 0.15, torch.Generator())
    with pytest.raises(ConfigError, match="mask_prob=1.5"):
        mlm_mask(ids, ids == PAD, MASK, VOCAB, 1.5, torch.Generator())


def test_pack_sequences_fills_rows_without_padding():
    docs = [list(range(100, 107)), [], list(range(200, 205)), list(range(300, 312))]
    rows = pack_sequences(docs, seq_len=8, cls_id=CLS, sep_id=SEP)
    # stream: 7 + SEP + 5 + SEP + 12 = 26 tokens -> 4 rows of 6 (2 dropped)
    assert rows.shape == (4, 8) and rows.dtype == torch.long
    assert (rows[:, 0] == CLS).all() and (rows[:, -1] == SEP).all()
    assert rows[0].tolist() == [CLS, 100, 101, 102, 103, 104, 105, SEP]
    assert rows[1].tolist() == [CLS, 106, SEP, 200, 201, 202, 203, SEP]
    assert rows[2].tolist() == [CLS, 204, SEP, 300, 301, 302, 303, SEP]
    assert rows[3].tolist() == [CLS, 304, 305, 306, 307, 308, 309, SEP]
    assert not (rows == PAD).any()


def test_pack_sequences_edge_cases():
    assert pack_sequences([[5, 6]], seq_len=8, cls_id=CLS, sep_id=SEP).shape == (0, 8)
    assert pack_sequences([], seq_len=8, cls_id=CLS, sep_id=SEP).shape == (0, 8)
    rows = pack_sequences([torch.arange(10, 22)], seq_len=5, cls_id=CLS, sep_id=SEP)  # tensors work too
    assert rows.tolist() == [[CLS, 10, 11, 12, SEP], [CLS, 13, 14, 15, SEP], [CLS, 16, 17, 18, SEP],
                             [CLS, 19, 20, 21, SEP]]
    with pytest.raises(ConfigError, match="seq_len=2"):
        pack_sequences([[1, 2, 3]], seq_len=2, cls_id=CLS, sep_id=SEP)


def test_example_order_is_per_epoch_shuffles_drawn_once():
    """The data order: consecutive slices of per-epoch shuffles of range(n), each epoch a permutation,
    a batch straddling two epochs taking the end of one and the start of the next; the permutation
    of an epoch is drawn once however many micro-batches read it."""
    from leanlm.training.text_batches import epoch_permutation, example_indices

    epoch_permutation.cache_clear()
    n, seed = 10, 3
    stream = torch.cat([example_indices(n, seed, start, 4) for start in range(0, 28, 4)])
    assert epoch_permutation.cache_info().misses == 3  # epochs 0, 1, 2 drawn once each, for 7 calls
    assert sorted(stream[:10].tolist()) == list(range(n)) == sorted(stream[10:20].tolist())
    assert stream[:10].tolist() != stream[10:20].tolist()  # a fresh shuffle each epoch
    assert example_indices(n, seed, 8, 4).tolist() == stream[8:12].tolist()  # straddles epochs 0 and 1
    out = example_indices(n, seed, 0, 4)
    out[:] = -1  # callers get their own tensor: the cached shuffle is not changed through it
    assert example_indices(n, seed, 0, 4).tolist() == stream[:4].tolist()
    assert example_indices(n, seed, 3, 0).tolist() == []
