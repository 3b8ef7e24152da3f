"""The Vaswani encoder-decoder: Table 3.3 / 3.15 attention counts, causality, decoding."""

from __future__ import annotations

import itertools

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import attention_blocks, model_attention_parameters, total_parameters
from leanlm.modeling.models import build_model
from leanlm.modeling.seq2seq import (
    BOS_ID,
    EOS_ID,
    TransformerForTranslation,
    _beam_search,
    _greedy,
    gnmt_length_penalty,
    sinusoidal_positions,
)


def paper_config(attention: str, n_layers: int = 6, d_model: int = 512, n_heads: int = 8,
                 head_dim: int = 64) -> ModelConfig:
    # Vocabulary and d_ff do not enter the attention counts: kept tiny so building is instant.
    return ModelConfig(backbone="transformer", vocab_size=8, n_layers=n_layers, n_decoder_layers=n_layers,
                       d_model=d_model, n_heads=n_heads, head_dim=head_dim, d_ff=8, max_position=128,
                       type_vocab_size=0, attention=attention)


def attention_millions(config: ModelConfig) -> float:
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = build_model(config, "seq2seq")
    assert len(attention_blocks(model)) == config.n_layers + 2 * config.n_decoder_layers
    return round(model_attention_parameters(model) / 1e6, 2)


# Table 3.3: attention parameters of the BASE encoder-decoder (6 + 6 layers, d_m 512, 8 heads of 64).
TABLE_3_3 = {"sha": 6.49, "mha": 18.87, "el_att": 9.44, "mqa": 10.62, "skv": 14.16, "mhe_add": 6.52,
             "mhe_mul": 6.52}


@pytest.mark.parametrize("attention", sorted(TABLE_3_3))
def test_table_3_3_attention_parameters(attention):
    assert attention_millions(paper_config(attention)) == TABLE_3_3[attention]


# Table 3.15: (N = encoder + decoder layers, d_m, h, d_h) -> (MHA, MHE-MUL) attention parameters (M).
TABLE_3_15 = [
    ((12, 512, 8, 64), (18.87, 6.52)),    # BASE
    ((12, 512, 16, 32), (18.87, 5.63)),
    ((12, 512, 4, 128), (18.87, 8.29)),
    ((8, 512, 8, 64), (12.58, 4.34)),     # 4L
    ((16, 512, 8, 64), (25.17, 8.69)),    # 8L
    ((12, 768, 12, 64), (42.47, 13.31)),  # 12H
    ((12, 1024, 16, 64), (75.50, 22.47)),  # BIG
]


@pytest.mark.parametrize("shape, expected", TABLE_3_15)
def test_table_3_15_attention_parameters(shape, expected):
    total_layers, d_model, heads, head_dim = shape
    got = tuple(attention_millions(paper_config(a, total_layers // 2, d_model, heads, head_dim))
                for a in ("mha", "mhe_mul"))
    assert got == expected


def tiny_config(attention: str = "mha", **overrides) -> ModelConfig:
    fields = dict(backbone="transformer", vocab_size=11, n_layers=2, n_decoder_layers=2, d_model=32, n_heads=4,
                  head_dim=8, d_ff=48, max_position=40, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                  attention=attention, layer_norm_eps=1e-5)
    return ModelConfig(**{**fields, **overrides})


def tiny_model(attention: str = "mha", seed: int = 0, **overrides) -> TransformerForTranslation:
    """A random model whose outputs vary with the source and the prefix: an untrained model with the
    tied softmax predicts nearly the same token everywhere, so decoding tests would prove little."""
    torch.manual_seed(seed)
    model = build_model(tiny_config(attention, tie_word_embeddings=False, **overrides), "seq2seq")
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)
    return model.eval()


def source_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 11, (3, 7), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, 4:], mask[1, 4:] = 0, 0  # a padded source
    return ids, mask


def test_shared_embedding_and_sizes():
    model = build_model(tiny_config(), "seq2seq")
    assert model.lm_head is None and model.encoder.embed.tokens is model.decoder.embed.tokens is model.embed_tokens
    # One matrix for source, target and softmax: counted once.
    unique = {id(p) for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))
    # ... and the 53 rows padding the 11-entry vocabulary to 64 (ModelConfig.pad_vocab_to) not at all.
    assert total_parameters(model) == sum(p.numel() for p in model.parameters()) - (64 - 11) * 32
    untied = build_model(tiny_config(tie_word_embeddings=False), "seq2seq")
    assert total_parameters(untied) == total_parameters(model) + 11 * 32


def test_sinusoidal_positions_follow_the_paper():
    table = sinusoidal_positions(5, 6)
    pos, i = 3, 1
    assert table[pos, 2 * i] == pytest.approx(torch.sin(torch.tensor(pos / 10000 ** (2 * i / 6))).item())
    assert table[pos, 2 * i + 1] == pytest.approx(torch.cos(torch.tensor(pos / 10000 ** (2 * i / 6))).item())
    assert "encoder.embed.positions" not in build_model(tiny_config(), "seq2seq").state_dict()


@pytest.mark.parametrize("attention", ["mha", "sha", "mhe_mul", "mqa", "skv", "el_att"])
def test_decoder_is_causal(attention):
    model = tiny_model(attention)
    src, mask = source_batch()
    target = torch.randint(4, 11, (3, 6), generator=torch.Generator().manual_seed(2))
    changed = target.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 4) % 7 + 4  # new tokens at positions 4, 5
    with torch.no_grad():
        a = model(input_ids=src, attention_mask=mask, decoder_input_ids=target)["logits"]
        b = model(input_ids=src, attention_mask=mask, decoder_input_ids=changed)["logits"]
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_source_padding_is_ignored():
    model = tiny_model()
    src, mask = source_batch()
    target = torch.randint(4, 11, (3, 5), generator=torch.Generator().manual_seed(3))
    garbage = src.clone()
    garbage[1, 4:] = 9  # whatever sits under the mask
    with torch.no_grad():
        a = model(input_ids=src, attention_mask=mask, decoder_input_ids=target)["logits"]
        b = model(input_ids=garbage, attention_mask=mask, decoder_input_ids=target)["logits"]
    torch.testing.assert_close(a, b)


def test_loss_is_label_smoothed_cross_entropy_over_labelled_tokens():
    model = tiny_model()
    src, mask = source_batch()
    target = torch.randint(4, 11, (3, 5), generator=torch.Generator().manual_seed(4))
    labels = target.clone()
    labels[0, 3:] = -100
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=target, labels=labels)
    logits = out["logits"][labels != -100]
    expected = torch.nn.functional.cross_entropy(logits, labels[labels != -100], label_smoothing=0.1)
    torch.testing.assert_close(out["loss"], expected)
    plain = build_model(tiny_config(tie_word_embeddings=False), "seq2seq", label_smoothing=0.0)
    plain.load_state_dict(model.state_dict())
    plain.eval()
    out = plain(input_ids=src, attention_mask=mask, decoder_input_ids=target, labels=labels)
    torch.testing.assert_close(out["loss"], torch.nn.functional.cross_entropy(logits, labels[labels != -100]))


@pytest.mark.parametrize("attention", ["mha", "sha", "mhe_mul", "mhe_add", "mqa", "skv", "el_att"])
def test_cached_step_logits_equal_full_forward(attention):
    """Feeding a target one token at a time through the key/value cache gives the teacher-forced logits."""
    model = tiny_model(attention)
    src, mask = source_batch()
    target = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, 11, (3, 5))], dim=1)
    with torch.no_grad():
        full = torch.log_softmax(model(input_ids=src, attention_mask=mask, decoder_input_ids=target)["logits"], -1)
        memory, memory_mask = model.encode(src, mask)
        cache = model.new_cache()
        steps = [model._step_logits(target[:, : t + 1], memory, memory_mask, cache) for t in range(target.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["mha", "mhe_mul", "skv"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_decoding_equals_recomputation(attention, beam_size):
    model = tiny_model(attention)
    src, mask = source_batch()
    cached = model.generate(src, mask, max_length=12, beam_size=beam_size)
    recomputed = model.generate(src, mask, max_length=12, beam_size=beam_size, use_cache=False)
    assert torch.equal(cached, recomputed)
    assert len({tuple(row) for row in cached.tolist()}) > 1  # not a degenerate all-same output


def test_greedy_equals_beam_search_with_one_beam():
    model = tiny_model("mhe_mul", seed=3)
    src, mask = source_batch()
    memory, memory_mask = model.encode(src, mask)
    greedy = _greedy(model, memory, memory_mask, 15, 1, 0.6, True, BOS_ID, EOS_ID)
    beam = _beam_search(model, memory, memory_mask, 15, 1, 0.6, True, BOS_ID, EOS_ID)
    assert torch.equal(greedy, beam)


def test_exhaustive_beam_search_finds_the_best_penalised_hypothesis():
    """With more beams than hypotheses, beam search is exact: compare with brute force."""
    model = tiny_model("mha", seed=5, vocab_size=6)  # tokens 0..5; </s> = 3
    src, mask = source_batch()
    src, mask = src[:1].clamp(max=5), mask[:1]
    max_length, alpha = 3, 0.6
    memory, memory_mask = model.encode(src, mask)
    found = _beam_search(model, memory, memory_mask, max_length, 6 ** max_length, alpha, True, BOS_ID, EOS_ID)[0]

    def score(sequence: tuple[int, ...]) -> float:
        tokens = torch.tensor([[BOS_ID, *sequence]])
        with torch.no_grad():
            logits = model.decoder(tokens[:, :-1], memory, memory_mask)
            log_probs = torch.log_softmax(model.logits(logits).float(), -1)[0]
        total = sum(log_probs[t, tok].item() for t, tok in enumerate(sequence))
        return total / gnmt_length_penalty(torch.tensor(len(sequence)), alpha).item()

    candidates = [seq for n in range(1, max_length + 1) for seq in itertools.product(range(6), repeat=n)
                  if EOS_ID not in seq[:-1] and (seq[-1] == EOS_ID or n == max_length)]
    best = max(candidates, key=score)
    got = tuple(found.tolist()[: len(best)])
    assert got == best
    assert all(t == model.config.pad_token_id for t in found.tolist()[len(best):])


def test_generate_restores_training_mode_and_checks_length():
    model = tiny_model()
    model.train()
    src, mask = source_batch()
    out = model.generate(src, mask, max_length=5, beam_size=2)
    assert model.training and out.shape[0] == 3 and out.shape[1] <= 5
    with pytest.raises(ValueError, match="max_position"):
        model.generate(src, mask, max_length=41)


def test_token_mixers_without_cross_form_are_refused():
    with pytest.raises(ConfigError, match="cross-attention"):
        build_model(tiny_config("linear"), "seq2seq")
    with pytest.raises(ConfigError):
        build_model(tiny_config("fnet"), "seq2seq")


def test_config_errors():
    with pytest.raises(ConfigError, match="n_decoder_layers"):
        build_model(tiny_config(n_decoder_layers=0), "seq2seq")
    with pytest.raises(ConfigError, match="label_smoothing"):
        build_model(tiny_config(), "seq2seq", label_smoothing=1.5)


def test_checkpoint_round_trip(tmp_path):
    from leanlm.modeling.checkpoint import load_model, save_checkpoint

    model = tiny_model("mhe_mul")
    save_checkpoint(model, model.config, tmp_path)
    loaded = load_model(tmp_path).eval()
    src, mask = source_batch()
    assert torch.equal(model.generate(src, mask, max_length=8), loaded.generate(src, mask, max_length=8))
