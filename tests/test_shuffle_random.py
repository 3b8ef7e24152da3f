"""Shuffle+Random (ch. 2's objective): the vectorised corruption's label statistics and the model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from leanlm.errors import ConfigError, DataError
from leanlm.hashing import HashCodebook, MD5Hasher
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.heads import BertForSequenceClassification
from leanlm.modeling.models import build_model, transfer_backbone
from leanlm.modeling.shuffle_random import BertForShuffleRandom
from leanlm.training.shuffle_random import IGNORE_INDEX, shuffle_random


def corpus_batch(rows=64, length=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 30_000, (rows, length), generator=g)
    special = torch.zeros_like(ids, dtype=torch.bool)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    special[:, 0] = special[:, -1] = True
    ids[-1, length // 2:], special[-1, length // 2:] = 0, True  # padding
    return ids, special


def test_label_statistics_and_consistency():
    ids, special = corpus_batch()
    corrupted, labels = shuffle_random(ids, special, torch.Generator().manual_seed(1),
                                       vocab_or_sampler=(5, 30_000))
    assert torch.equal(labels == IGNORE_INDEX, special)
    eligible = (~special).sum().item()
    shuffled = (labels == 1).sum().item() / eligible
    replaced = (labels == 2).sum().item() / eligible
    # About 10% each (binomial sd ~0.25% here); a shuffled token can land on its own place.
    assert 0.085 < shuffled < 0.105 and 0.09 < replaced < 0.11
    assert torch.equal(corrupted[labels == 0], ids[labels == 0])
    assert (corrupted[labels > 0] != ids[labels > 0]).all()
    assert torch.equal(corrupted[special], ids[special])
    assert ((corrupted[labels == 2] >= 5) & (corrupted[labels == 2] < 30_000)).all()
    for row in range(ids.size(0)):  # shuffling permutes tokens within their row
        keep = labels[row] != 2
        assert torch.equal(corrupted[row][keep].sort().values, ids[row][keep].sort().values)


def test_identical_tokens_shuffled_onto_each_other_stay_original():
    ids = torch.full((4, 50), 9)
    ids[:, ::2] = 11
    special = torch.zeros_like(ids, dtype=torch.bool)
    corrupted, labels = shuffle_random(ids, special, torch.Generator().manual_seed(0), 0.5, 0.0,
                                       vocab_or_sampler=100)
    moved = corrupted != ids
    assert torch.equal(labels == 1, moved) and (labels != 2).all()
    assert 0 < moved.float().mean() < 0.5


def test_draws_come_from_the_generator_only():
    ids, special = corpus_batch(rows=8, length=64)
    a = shuffle_random(ids, special, torch.Generator().manual_seed(5), vocab_or_sampler=1000)
    torch.manual_seed(123)  # the global stream must not matter
    b = shuffle_random(ids, special, torch.Generator().manual_seed(5), vocab_or_sampler=1000)
    c = shuffle_random(ids, special, torch.Generator().manual_seed(6), vocab_or_sampler=1000)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_codebook_sampler_and_bad_arguments():
    book = HashCodebook(MD5Hasher())
    ids = torch.tensor(book.encode(["one two three four five six seven eight nine ten"] * 4,
                                   add_special_tokens=True))
    special = ids < book.n_special
    corrupted, labels = shuffle_random(ids, special, torch.Generator().manual_seed(0), 0.2, 0.3,
                                       vocab_or_sampler=book.random_ids)
    assert (corrupted[labels == 2] >= book.n_special).all() and (labels == 2).any()
    with pytest.raises(ConfigError):
        shuffle_random(ids, special, torch.Generator(), 0.6, 0.5, vocab_or_sampler=10)
    with pytest.raises(DataError):
        shuffle_random(ids, special[:, :3], torch.Generator(), vocab_or_sampler=10)
    with pytest.raises(DataError):
        shuffle_random(ids, special, torch.Generator(), vocab_or_sampler=lambda shape, g: torch.zeros(3))


TINY = dict(vocab_size=200, n_layers=2, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=40)


def test_model_loss_is_token_level_cross_entropy_and_backbone_transfers():
    torch.manual_seed(0)
    config = ModelConfig(**TINY)
    model = build_model(config, "shuffle_random").eval()
    assert isinstance(model, BertForShuffleRandom) and model.encoder.pooler is None
    ids, special = corpus_batch(rows=3, length=20)
    ids = ids % 200
    inputs, labels = shuffle_random(ids, special, torch.Generator().manual_seed(0), 0.2, 0.2,
                                    vocab_or_sampler=200)
    out = model(input_ids=inputs, labels=labels)
    assert out["logits"].shape == (3, 20, 3)
    keep = labels != IGNORE_INDEX
    torch.testing.assert_close(out["loss"], F.cross_entropy(out["logits"][keep], labels[keep]))
    assert model(input_ids=inputs)["loss"] is None
    none = model(input_ids=inputs, labels=torch.full_like(labels, IGNORE_INDEX))["loss"]
    assert none.item() == 0.0 and none.requires_grad
    classifier = transfer_backbone(BertForSequenceClassification(config, num_labels=2), model)
    assert torch.equal(classifier.encoder.layers[0].output.weight, model.encoder.layers[0].output.weight)


def _official_reference(ids, special, generator, p_shuffle, p_random, vocab):
    """The official collator's steps, one position at a time (draws in the same order)."""
    order = torch.randperm(ids.shape[1], generator=generator)
    u_shuffle = torch.rand(ids.shape, generator=generator)
    u_random = torch.rand(ids.shape, generator=generator)
    words = torch.randint(vocab, ids.shape, generator=generator, dtype=ids.dtype)
    out, labels = ids.clone(), torch.zeros_like(ids)
    for b in range(ids.shape[0]):
        for i in range(ids.shape[1]):
            if special[b, i]:
                labels[b, i] = IGNORE_INDEX
                continue
            source = int(order[i])
            if u_shuffle[b, i] < p_shuffle:
                out[b, i] = ids[b, i] if special[b, source] else ids[b, source]  # a special never moves in
                labels[b, i] = 1
            elif u_random[b, i] < p_random:
                out[b, i], labels[b, i] = words[b, i], 2
    return out, labels


def test_official_code_corruption_follows_the_collator():
    from leanlm.training.shuffle_random import shuffle_random_as_official_code
    from leanlm.objectives.shuffle_random import ShuffleRandomBatches

    ids = torch.randint(5, 40, (4, 24), generator=torch.Generator().manual_seed(0))
    ids[:, 0], ids[:, -1], ids[1, 7], ids[2, 3:6] = 2, 3, 3, 7  # [CLS] ... [SEP], a mid [SEP], repeats
    special = torch.isin(ids, torch.tensor([0, 1, 2, 3, 4]))
    got = shuffle_random_as_official_code(ids, special, torch.Generator().manual_seed(5), 0.3, 0.3, 40)
    want = _official_reference(ids, special, torch.Generator().manual_seed(5), 0.3, 0.3, 40)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (got[1] == 1).any() and (got[1] == 2).any() and (got[1][special] == IGNORE_INDEX).all()
    assert torch.equal(got[0][special], ids[special])  # special positions keep their tokens
    batches = ShuffleRandomBatches(ids, [0, 1, 2, 3, 4], 40, 4, 1, 0.3, 0.3, seed=0, corruption="official_code")
    out = batches.masked(ids, torch.Generator().manual_seed(5))
    assert torch.equal(out["input_ids"], want[0]) and torch.equal(out["labels"], want[1])
    with pytest.raises(ConfigError, match="corruption='collator' must be one of"):
        ShuffleRandomBatches(ids, [0, 1, 2, 3, 4], 40, 4, 1, 0.3, 0.3, seed=0, corruption="collator")
    with pytest.raises(ConfigError, match=r"must lie in \[0, 1\)"):
        shuffle_random_as_official_code(ids, special, torch.Generator(), 1.0, 0.1, 40)


def test_profile_may_pick_the_official_corruption(scratch_root):
    from leanlm.config import load_config
    from params_files import edit_yaml

    smoke = scratch_root / "params/smoke.yaml"
    edit_yaml(smoke, lambda d: d["pretrain"]["shuffle_random"].update(corruption="official_code"))
    assert load_config("params/smoke.yaml")["pretrain"]["shuffle_random"]["corruption"] == "official_code"
    edit_yaml(smoke, lambda d: d["pretrain"]["shuffle_random"].update(corruption="code"))
    with pytest.raises(ConfigError, match="corruption"):
        load_config("params/smoke.yaml")
