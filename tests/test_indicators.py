"""Attention indicators (§4.4.4) on hand-built maps with known values, logit histograms, and the
context-length perplexity of Table 4.4."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import DataError
from leanlm.evaluation.indicators import (INDICATORS, attention_indicators, context_length_perplexity, head_diversity,
                                          layer_indicators, logit_histogram, normalise_indicators)

L = 6


def uniform_causal(length: int = L) -> torch.Tensor:
    """Row i attends uniformly to tokens 0..i: mean pooling."""
    return torch.ones(length, length).tril() / torch.arange(1, length + 1).unsqueeze(1)


def diagonal(length: int = L) -> torch.Tensor:
    return torch.eye(length)


def first_token_sink(length: int = L) -> torch.Tensor:
    out = torch.zeros(length, length)
    out[:, 0] = 1.0
    return out


def previous_token(length: int = L) -> torch.Tensor:
    out = torch.zeros(length, length)
    out[0, 0] = 1.0
    out[torch.arange(1, length), torch.arange(0, length - 1)] = 1.0
    return out


def layer(*heads: torch.Tensor, batch: int = 2) -> torch.Tensor:
    return torch.stack(heads).unsqueeze(0).expand(batch, -1, -1, -1).clone()


def test_indicator_names_follow_the_thesis():
    assert INDICATORS == ("ENTROPY", "CONC", "HEADDIV", "LOCFOC_0", "LOCFOC_1", "LOCFOC_2", "LOCFOC_3", "SINK")


def test_uniform_attention():
    values = layer_indicators(layer(uniform_causal(), uniform_causal()))
    harmonic = sum(1 / k for k in range(1, L + 1))
    assert values["ENTROPY"] == pytest.approx(math.lgamma(L + 1), rel=1e-5)  # sum_i log(i + 1) = log L!
    assert values["CONC"] == pytest.approx(math.sqrt(harmonic), rel=1e-5)
    assert values["SINK"] == pytest.approx(harmonic / L, rel=1e-5)
    for n in range(4):
        assert values[f"LOCFOC_{n}"] == pytest.approx(sum(1 / (i + 1) for i in range(n, L)) / (L - n), rel=1e-5)
    assert values["HEADDIV"] == 0.0  # identical heads


def test_one_hot_diagonal():
    values = layer_indicators(layer(diagonal(), diagonal()))
    assert values["ENTROPY"] == 0.0
    assert values["CONC"] == pytest.approx(math.sqrt(L))
    assert values["SINK"] == pytest.approx(1 / L)  # only the first query's attention to itself
    assert values["LOCFOC_0"] == pytest.approx(1.0)
    assert values["LOCFOC_1"] == values["LOCFOC_2"] == values["LOCFOC_3"] == 0.0


def test_first_token_sink():
    values = layer_indicators(layer(first_token_sink(), first_token_sink()))
    assert values["ENTROPY"] == 0.0
    assert values["CONC"] == pytest.approx(math.sqrt(L))
    assert values["SINK"] == pytest.approx(1.0)
    for n in range(4):  # only query n attends at distance n (to the first token)
        assert values[f"LOCFOC_{n}"] == pytest.approx(1 / (L - n))


def test_local_focus_at_distance_one():
    values = layer_indicators(layer(previous_token()))
    assert values["LOCFOC_1"] == pytest.approx(1.0)
    assert values["LOCFOC_0"] == pytest.approx(1 / L)
    assert values["LOCFOC_2"] == 0.0


def test_head_diversity_and_per_head_values():
    attn = layer(diagonal(), first_token_sink())
    # The heads differ on the diagonal and in column 0 below the first row: 2 (L - 1) positions with
    # population std 0.5 each, averaged over the L (L + 1) / 2 causal positions.
    expected = 2 * (L - 1) / (L * (L + 1))
    assert head_diversity(attn).tolist() == pytest.approx([expected, expected])
    per_head = attention_indicators(attn)
    assert per_head["SINK"].tolist() == pytest.approx([1 / L, 1.0])
    assert per_head["LOCFOC_0"].tolist() == pytest.approx([1.0, 1 / L])
    assert per_head["HEADDIV"].dim() == 0 and float(per_head["HEADDIV"]) == pytest.approx(expected)
    assert float(head_diversity(layer(diagonal()))[0]) == 0.0  # one head: nothing to differ


def test_bad_shapes_are_refused():
    with pytest.raises(DataError, match="shape"):
        attention_indicators(torch.ones(2, 3, 4, 5))
    with pytest.raises(DataError, match="4-D"):
        attention_indicators(diagonal())


def test_normalisation_of_the_figures():
    rows = [{"ENTROPY": 2.0, "CONC": 1.0, "HEADDIV": 0.3, "LOCFOC_0": 0.2, "SINK": 0.5},
            {"ENTROPY": 4.0, "CONC": 3.0, "HEADDIV": 0.3, "LOCFOC_0": 0.1, "SINK": 0.25},
            {"ENTROPY": 3.0, "CONC": 2.0, "HEADDIV": 0.3, "LOCFOC_0": 0.4, "SINK": 0.0}]
    out = normalise_indicators(rows)
    assert [r["ENTROPY"] for r in out] == [0.0, 1.0, 0.5]
    assert [r["CONC"] for r in out] == [0.0, 1.0, 0.5]
    assert [r["HEADDIV"] for r in out] == [0.0, 0.0, 0.0]  # all equal: no spread to normalise
    assert [r["LOCFOC_0"] for r in out] == pytest.approx([0.4, 0.2, 0.8])  # absolute, scaled by two
    assert [r["SINK"] for r in out] == [0.5, 0.25, 0.0]  # absolute
    assert rows[0]["ENTROPY"] == 2.0  # inputs untouched


def test_logit_histogram():
    scores = torch.tensor([[1.0, 99.0, 99.0], [-2.0, 3.0, 99.0], [0.5, float("-inf"), 2000.0]])
    out = logit_histogram(scores, bins=[-4.0, 0.0, 4.0])
    # Only the causal triangle counts: 1, -2, 3, 0.5, 2000 (the -inf, a mask, is left out and counted).
    assert out["n"] == 5 and out["n_nonfinite"] == 1
    assert out["counts"] == [1, 3] and out["above"] == 1 and out["below"] == 0
    assert out["abs_max"] == 2000.0 and out["min"] == -2.0
    magnitudes = logit_histogram(scores, bins=[0.0, 10.0, 1e4], magnitude=True)
    assert magnitudes["counts"] == [4, 1]
    even = logit_histogram(torch.arange(10.0), bins=5, causal=False)
    assert even["counts"] == [2, 2, 2, 2, 2] and even["edges"][0] == 0.0 and even["edges"][-1] == 9.0
    with pytest.raises(DataError, match="increasing"):
        logit_histogram(scores, bins=[1.0, 0.0])


class Bigram(nn.Module):
    """Logits from the current token only: a text's perplexity does not depend on the context length."""

    def __init__(self, vocab_size: int = 11, max_position: int = 512):
        super().__init__()
        self.config = SimpleNamespace(max_position=max_position)
        torch.manual_seed(0)
        self.table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, input_ids, attention_mask=None):
        return {"logits": self.table(input_ids)}


class Uniform(Bigram):
    def forward(self, input_ids, attention_mask=None):
        return {"logits": torch.zeros(*input_ids.shape, self.table.num_embeddings)}


def test_context_length_perplexity():
    tokens = torch.randint(0, 11, (300,), generator=torch.Generator().manual_seed(1))
    assert context_length_perplexity(Uniform(), tokens, lengths=(8, 64)) == {8: pytest.approx(11.0), 64: pytest.approx(11.0)}
    model = Bigram(max_position=64)
    logp = F.log_softmax(model.table.weight.detach().double(), dim=-1)
    direct = math.exp(-float(sum(logp[a, b] for a, b in zip(tokens[:-1].tolist(), tokens[1:].tolist()))) / 299)
    out = context_length_perplexity(model, tokens, lengths=(4, 16, 64, 128))
    assert set(out) == {4, 16, 64}  # 128 exceeds max_position: left out
    assert all(v == pytest.approx(direct, rel=1e-5) for v in out.values())
    # Several texts, each predicted after a prefix token, with a word-level normaliser.
    two = context_length_perplexity(model, [tokens[:100].tolist(), tokens[100:].tolist()], lengths=(16,),
                                    prefix_token_id=0, n_units=150)
    nll = -float(logp[0, int(tokens[0])] + logp[0, int(tokens[100])]) - sum(
        float(logp[a, b]) for i, (a, b) in enumerate(zip(tokens[:-1].tolist(), tokens[1:].tolist())) if i != 99)
    assert two[16] == pytest.approx(math.exp(nll / 150), rel=1e-5)
