"""The Qwen2.5-style decoder of ch. 4: causality for every variant, loss, layouts, skip, capture,
the fixed Q/K stream and its cache, and Table 4.10's sizes and parameter counts."""

import pytest
import torch
import torch.nn.functional as F

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.layouts import skip_set
from leanlm.modeling.mixers import CH4_VARIANTS, MIXERS
from leanlm.modeling.models import build_model
from leanlm.modeling.qwen import QwenForCausalLM
from leanlm.modeling.qwen_sizes import TABLE_4_10, qwen_config, table_4_10_rows

VOCAB, LAYERS = 50, 4
VARIANTS = CH4_VARIANTS + ["approximate_per_term"]


def tiny(attention="standard", layout="uniform", seed=0, **kw):
    torch.manual_seed(seed)
    cfg = ModelConfig(backbone="qwen", vocab_size=VOCAB, n_layers=LAYERS, d_model=32, n_heads=4,
                      head_dim=8, d_ff=48, max_position=32, type_vocab_size=0, dropout=0.0,
                      attention_dropout=0.0, layer_norm_eps=1e-6, attention=attention,
                      layout=layout, **kw)
    model = build_model(cfg, "causal_lm")
    if attention == "fixed_seq_qk":
        model.set_fixed_sequence(torch.arange(32) % VOCAB)
    return model


def ids(batch=2, length=12, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("layout", ["uniform", "hybrid"])
@pytest.mark.parametrize("attention", VARIANTS)
def test_causal_for_every_variant(attention, layout):
    """Changing future tokens never changes earlier logits, in training and inference forms."""
    # key/value heads are an option of the attention mixers: a uniform MLP model has none
    grouped = layout != "uniform" or "n_kv_heads" in MIXERS.get(attention).options
    model = tiny(attention, layout, n_kv_heads=2 if grouped else 0)
    a = ids()
    b = a.clone()
    b[:, 7:] = (b[:, 7:] + 1) % VOCAB
    for train in (True, False):
        model.train(train)
        with torch.set_grad_enabled(train):
            la, lb = model(input_ids=a)["logits"], model(input_ids=b)["logits"]
        torch.testing.assert_close(la[:, :7], lb[:, :7])
        assert not torch.allclose(la[:, 7:], lb[:, 7:])


def test_loss_is_shifted_next_token_cross_entropy_ignoring_minus_100():
    model = tiny()
    x = ids()
    labels = x.clone()
    labels[0, 5] = -100
    out = model(input_ids=x, labels=labels)
    logits = out["logits"]
    assert logits.shape == (2, 12, VOCAB)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
    torch.testing.assert_close(out["loss"], expected)
    assert model(input_ids=x)["loss"] is None


@pytest.mark.parametrize("attention", ["standard", "rnd_emb_qk", "non_approximate"])
def test_right_padding_leaves_real_tokens_unchanged(attention):
    model = tiny(attention).eval()
    x = ids(batch=1, length=9)
    padded = torch.cat([x, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, 3)], 1).long()
    with torch.no_grad():
        full = model(input_ids=padded, attention_mask=mask)["logits"][:, :9]
        torch.testing.assert_close(full, model(input_ids=x)["logits"])


def test_layout_places_variants_and_embeddings_tie_per_config():
    model = tiny("non_approximate", "hybrid")
    assert model.layer_kinds == ["simple", "standard"] * 2
    names = [type(layer.self_attn).__name__ for layer in model.model.layers]
    assert names == ["NonApproximateAttention", "StandardAttention"] * 2
    assert model.lm_head.weight is model.model.embed_tokens.weight
    untied = tiny(tie_word_embeddings=False)
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    # A standard model's keys are Hugging Face Qwen2's.
    keys = set(tiny().state_dict())
    assert {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias",
            "model.layers.0.mlp.gate_proj.weight", "model.norm.weight", "lm_head.weight"} <= keys


def test_bad_attention_or_layout_is_a_config_error():
    with pytest.raises(ConfigError, match="not a ch. 4 token mixer"):
        tiny("mhe_mul")
    with pytest.raises(ConfigError, match="layout='diagonal'"):
        tiny(layout="diagonal")
    with pytest.raises(ConfigError, match="set_fixed_sequence"):
        build_model(tiny("fixed_seq_qk").config, "causal_lm")(input_ids=ids())


def test_skip_evaluation_equals_the_model_without_its_simple_layers():
    """Table 4.1's SKIP: a hybrid evaluated without its simple layers, no retraining, is exactly a
    standard model made of its standard layers."""
    hybrid = tiny("rnd_emb_qk", "hybrid").eval()
    x = ids()
    with torch.no_grad():
        whole = hybrid(input_ids=x)["logits"]
        hybrid.skip_layers = skip_set("hybrid", LAYERS)
        skipped = hybrid(input_ids=x)["logits"]
    assert not torch.allclose(whole, skipped)
    cfg = hybrid.config.replace(n_layers=LAYERS // 2, attention="standard", layout="uniform")
    small = build_model(cfg, "causal_lm").eval()
    state = {k: v for k, v in hybrid.state_dict().items() if "fixed_" not in k}
    renamed = {}
    for key, value in state.items():
        if key.startswith("model.layers."):
            index = int(key.split(".")[2])
            if index % 2 == 0:
                continue
            key = key.replace(f"model.layers.{index}.", f"model.layers.{index // 2}.", 1)
        renamed[key] = value
    small.load_state_dict(renamed)
    with torch.no_grad():
        torch.testing.assert_close(skipped, small(input_ids=x)["logits"])
    with pytest.raises(ConfigError, match="outside"):
        QwenForCausalLM(hybrid.config, skip_layers={LAYERS})


@pytest.mark.parametrize("attention", ["rnd_emb_qk", "fixed_seq_qk"])
def test_fixed_maps_identical_across_batch_items_and_inputs(attention):
    model = tiny(attention).eval()
    maps = []
    for seed in (1, 2):
        with torch.no_grad(), model.capture_attention() as captured:
            model(input_ids=ids(batch=3, seed=seed))
        assert sorted(captured) == list(range(LAYERS))
        maps.append(captured)
    for layer in range(LAYERS):
        probs = maps[0][layer]["probs"]
        assert probs.shape == (1, 4, 12, 12)  # one map, shared by the batch
        torch.testing.assert_close(probs, maps[1][layer]["probs"])
        torch.testing.assert_close(probs.sum(-1), torch.ones(1, 4, 12))
    # The training form (fixed row in the batch) forms the same maps.
    model.train()
    with model.capture_attention() as captured:
        model(input_ids=ids(batch=3, seed=3))
    torch.testing.assert_close(captured[2]["probs"], maps[0][2]["probs"])


def test_static_emb_qk_maps_do_not_depend_on_depth():
    """StaticEmbQK's layer-l map comes from the embeddings and layer l's own weights only: changing
    every earlier layer leaves it unchanged (so all layers' maps could be computed in parallel)."""
    model = tiny("static_emb_qk").eval()
    x = ids()
    with torch.no_grad(), model.capture_attention() as before:
        model(input_ids=x)
        for layer in model.model.layers[:3]:
            layer.self_attn.v_proj.weight.mul_(3.0)
            layer.mlp.up_proj.weight.add_(0.5)
        with model.capture_attention() as after:
            model(input_ids=x)
    torch.testing.assert_close(before[3]["probs"], after[3]["probs"])
    # whereas a standard model's last map does change when earlier layers do
    standard = tiny("standard").eval()
    with torch.no_grad(), standard.capture_attention() as first:
        standard(input_ids=x)
        standard.model.layers[0].self_attn.v_proj.weight.mul_(3.0)
        with standard.capture_attention() as second:
            standard(input_ids=x)
    assert not torch.allclose(first[3]["probs"], second[3]["probs"])


def test_capture_attention_shapes_and_normal_path():
    model = tiny("approximate", "hybrid", n_kv_heads=2).eval()
    with torch.no_grad(), model.capture_attention() as captured:
        logits = model(input_ids=ids())["logits"]
    assert sorted(captured) == list(range(LAYERS))
    for entry in captured.values():
        assert entry["probs"].shape == entry["logits"].shape == (2, 4, 12, 12)
        torch.testing.assert_close(entry["probs"].sum(-1), torch.ones(2, 4, 12))
        assert (entry["probs"].triu(1) == 0).all()
    assert model.model._capture is None  # outside the block nothing is recorded
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids())["logits"], logits)
    mlp = tiny("mlp", "hybrid")
    with torch.no_grad(), mlp.capture_attention() as captured:
        mlp(input_ids=ids())
    assert sorted(captured) == [1, 3]  # MLP layers have no map


def test_fixed_stream_cache_matches_training_form_and_follows_updates():
    model = tiny("rnd_emb_qk")
    x = ids()
    train_logits = model(input_ids=x)["logits"].detach()
    model.eval()
    with torch.no_grad():
        cached = model(input_ids=x)["logits"]
    torch.testing.assert_close(cached, train_logits)
    assert set(model.fixed_qk()) == set(range(LAYERS))
    # One optimiser step changes the weights in place: the cache must notice.
    model.train()
    model(input_ids=x, labels=x)["loss"].backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.5 * p.grad)
    updated = model(input_ids=x)["logits"].detach()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=x)["logits"], updated)


def test_checkpoint_round_trip_keeps_the_fixed_sequence(tmp_path):
    from leanlm.modeling.checkpoint import load_model, save_checkpoint

    model = tiny("fixed_seq_qk").eval()
    save_checkpoint(model, model.config, tmp_path / "ckpt")
    loaded = load_model(tmp_path / "ckpt").eval()
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=x)["logits"], model(input_ids=x)["logits"])


# Table 4.10 as printed.
PRINTED_4_10 = {
    "70M": (512, 2048, 6, 6, 8, 8),
    "160M": (768, 3072, 12, 12, 12, 12),
    "500M": (896, 4864, 24, 24, 14, 14),
    "1.7B": (2048, 6144, 28, 28, 16, 16),
}


def test_table_4_10_sizes_and_parameter_counts():
    frame = table_4_10_rows().set_index("size")
    for size, (hidden, inter, layers, window, heads, kv) in PRINTED_4_10.items():
        row = frame.loc[size]
        assert (row.hidden, row.intermediate, row.layers, row.max_window_layers, row.heads,
                row.kv_heads) == (hidden, inter, layers, window, heads, kv)
        cfg = qwen_config(size)
        assert (cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.n_heads, cfg.kv_heads) == \
            (hidden, inter, layers, heads, kv)
        # Closed form of the standard model (untied embeddings, QKV bias, or q/k norm for 1.7B).
        d, dh = hidden, cfg.head_dim
        attn = 4 * d * heads * dh + (2 * dh if cfg.qk_norm else 3 * heads * dh)
        per_layer = attn + 3 * d * inter + 2 * d
        assert row.params_standard == 2 * 50304 * d + layers * per_layer + d
        counts = [row[f"params_{v}"] for v in CH4_VARIANTS if v != "mlp"]
        assert len(set(counts)) == 1  # strictly equal (§4.4.2)
        assert abs(row.params_mlp - row.params_standard) <= 1.5 * d * layers
    assert frame.loc["1.7B", "max_rel_diff"] < 1e-4
    assert set(frame.index) == set(TABLE_4_10)
