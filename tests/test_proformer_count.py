"""ProFormer's #Total in Table 2.2 is the count of the model the pipeline trains (DESIGN §8): the
thesis's 15.1M has no learned position or token-type tables, so ProFormer trains with fixed sinusoidal
positions and no token types, and the table counts that model, not a model with tables subtracted."""

from __future__ import annotations

import pytest
import torch

from leanlm.config import load_config
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import total_parameters
from leanlm.modeling.embeddings import BertEmbeddings
from leanlm.modeling.seq2seq import sinusoidal_positions
from leanlm.reporting.ch2.counts import classifier_on_meta, format_count, table_2_2_parameter_rows
from leanlm.runs import runs
from leanlm.errors import ConfigError


@pytest.fixture(scope="module")
def paper_proformer() -> ModelConfig:
    config = load_config("params/paper.yaml")
    (run,) = [r for r in runs(config) if r.run_id == "ch2_hashformers-proformer"]
    # The vocabulary size comes from the tokenizer at training time; ProFormer has no table for it.
    return ModelConfig.from_dict({**run.model, "vocab_size": 50265}, where="paper ProFormer")


def test_the_trained_proformer_is_what_table_2_2_counts(paper_proformer):
    model = classifier_on_meta(paper_proformer)
    names = [name for name, _ in model.named_parameters()]
    assert not any("position_embeddings" in n or "token_type_embeddings" in n for n in names), names
    rows = table_2_2_parameter_rows().set_index("model")
    assert total_parameters(model) == rows.loc["ProFormer", "total"]
    assert format_count(total_parameters(model)) == "15.1M"  # as printed, without fitting


def test_sinusoidal_positions_and_no_token_types():
    config = ModelConfig(vocab_size=50, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=12,
                         type_vocab_size=0, positions="sinusoidal")
    embeddings = BertEmbeddings(config)
    assert [k for k, _ in embeddings.named_parameters()] == ["word_embeddings.weight", "norm.weight", "norm.bias"]
    assert "positions" not in embeddings.state_dict()  # a fixed table: rebuilt, not stored
    embeddings.eval()
    ids = torch.tensor([[1, 7, 3]])
    expected = embeddings.norm(embeddings.word_embeddings(ids) + sinusoidal_positions(12, 16)[:3][None])
    # token_type_ids are ignored by a model without a token-type table
    assert torch.allclose(embeddings(ids, token_type_ids=torch.tensor([[0, 0, 1]])), expected)
    with pytest.raises(ValueError, match="longer than the model's 12 positions"):
        embeddings(torch.ones(1, 13, dtype=torch.long))


def test_unknown_positions_is_named():
    with pytest.raises(ConfigError, match="positions='rotary'"):
        ModelConfig(vocab_size=50, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=12,
                    positions="rotary")
