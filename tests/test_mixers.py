"""Ch. 4's token mixers: recurrent == parallel, the exact formulas, stability, padding, GQA."""

import dataclasses
import math

import pytest
import torch

from leanlm.modeling.mixers import CH4_VARIANTS, MIXERS, MixerContext

from mixer_cases import D, DECODING, DH, HEADS, context, make


def test_registry_has_every_variant_with_table_rows():
    assert set(CH4_VARIANTS) <= set(MIXERS.names())
    for name in CH4_VARIANTS:
        cls = MIXERS.get(name)
        assert cls.label and cls.complexity_latex and set(cls.flops_latex) == {"prefill", "decode"}
        assert cls.activation_latex and cls.cache_latex
    # A few printed values (Tables 4.6, 4.8) at B=2, L=3, d=4, h=2.
    assert MIXERS.get("standard").flops(2, 3, 4, 2, "prefill") == 4 * 2 * 9 * 4 + 6 * 2 * 3 * 16
    assert MIXERS.get("non_approximate").cache_size(2, 3, 4, 2) == 2 * 2 * 4 + 4 * 2 * 2
    assert MIXERS.get("rnd_emb_qk").cache_size(2, 3, 4, 2) == 2 * 3 * 3 * 4


def test_parameters_match_across_variants():
    counts = {name: sum(p.numel() for p in make(name).parameters()) for name in MIXERS.names()}
    attention = counts.pop("mlp")
    assert len(set(counts.values())) == 1  # every projected variant: the same Q/K/V/O
    assert abs(attention - counts["standard"]) <= 1.5 * D  # integer width, as close as it gets
    assert make("mlp").width == round(counts["standard"] / (3 * D))


@pytest.mark.parametrize("name", DECODING)
def test_recurrent_form_equals_parallel_form(name):
    """Prefill 50 tokens, then step one token at a time: the same outputs as one forward over 75
    (longer than the 64-token chunks of the linear forms, and not a multiple of them)."""
    mixer = make(name, kv=2 if "n_kv_heads" in MIXERS.get(name).options else 0).eval()  # MLP has no K/V heads
    length, prompt = 75, 50
    h = torch.randn(2, length, D, dtype=torch.float64)
    ctx = context(mixer, length)
    full = mixer(h, ctx)
    head = MixerContext(cos=ctx.cos[:prompt], sin=ctx.sin[:prompt], fixed_qk=ctx.fixed_qk,
                        embeddings=None if ctx.embeddings is None else ctx.embeddings[:, :prompt])
    out, state = mixer.prefill(h[:, :prompt], head)
    outs = [out]
    for t in range(prompt, length):
        emb = None if ctx.embeddings is None else ctx.embeddings[:, t:t + 1]
        y, state = mixer.step(h[:, t], state, MixerContext(embeddings=emb))
        outs.append(y[:, None])
    rtol = 1e-7 if name == "approximate_per_term" else 1e-10  # its q.sum(k) denominators cancel
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=rtol, atol=rtol)


def taylor_reference(q, k, v):
    """Quadratic form of eq. 4.6: weights 1 + s + s^2/2 over j <= i, normalised per row."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    w = (1 + s + s * s / 2).tril()
    return (w @ v) / w.sum(-1, keepdim=True)


def test_approximate_is_the_taylor_attention():
    mixer = make("approximate")
    h = torch.randn(2, 100, D, dtype=torch.float64)
    ctx = context(mixer, 100)
    q, k, v = mixer.qkv(h, ctx.cos, ctx.sin)
    torch.testing.assert_close(mixer(h, ctx), mixer.merge(taylor_reference(q, k, v)))


def test_approximate_per_term_follows_appendix_equations():
    """Eqs. 4.14-4.17 computed literally, token by token."""
    mixer = make("approximate_per_term")
    h = torch.randn(1, 20, D, dtype=torch.float64)
    ctx = context(mixer, 20, batch=1)
    q, k, v = mixer.qkv(h, ctx.cos, ctx.sin)
    rows = []
    for i in range(20):
        qi, kj, vj = q[:, :, i], k[:, :, : i + 1], v[:, :, : i + 1]
        o0 = vj.sum(2) / (i + 1)
        q2, k2 = qi ** 2 / math.sqrt(2), kj ** 2 / math.sqrt(2)
        o1, o2 = ((a[..., None, :] @ (b.transpose(-1, -2) @ vj))[..., 0, :]
                  / (a * b.sum(2)).sum(-1, keepdim=True) for a, b in ((qi, kj), (q2, k2)))
        rows.append(o0 + o1 + o2)
    torch.testing.assert_close(mixer(h, ctx), mixer.merge(torch.stack(rows, 2)), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_non_approximate_equals_softmax_over_self_scores_and_is_stable(scale):
    """o_i = softmax_{j<=i}(s_j) v_j (eq. 4.18), also with logits in the thousands (the uniform
    model's outliers): the chunked running-max form neither overflows nor loses the weights."""
    mixer = make("non_approximate")
    with torch.no_grad():
        mixer.q_proj.weight.mul_(scale)
        mixer.k_proj.weight.mul_(scale)
    h = torch.randn(2, 130, D, dtype=torch.float64)
    s, v = mixer.scores(h)
    assert scale == 1.0 or s.abs().max() > 1e3
    future = torch.ones(130, 130, dtype=torch.bool).triu(1)
    weights = s[..., None, :].expand(-1, -1, 130, -1).masked_fill(future, float("-inf")).softmax(-1)
    expected = mixer.merge(weights @ v)
    got = mixer(h, MixerContext())
    torch.testing.assert_close(got, expected)
    got32 = mixer.float()(h.float(), MixerContext())
    assert torch.isfinite(got32).all()
    torch.testing.assert_close(got32.double(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["standard", "approximate", "non_approximate"])
def test_left_padding_is_masked_out(name):
    """Padded keys contribute nothing: a left-padded row gives the unpadded row's outputs (RoPE is
    relative, so the shift does not matter for these variants)."""
    mixer = make(name).eval()
    pad, length = 5, 40
    h = torch.randn(1, length, D, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, pad, D, dtype=torch.float64), h], 1)
    mask = torch.cat([torch.zeros(1, pad), torch.ones(1, length)], 1).long()
    ctx = context(mixer, pad + length, batch=1)
    ctx.attention_mask = mask
    plain = mixer(h, context(mixer, length, batch=1))
    torch.testing.assert_close(mixer(padded, ctx)[:, pad:], plain)


@pytest.mark.parametrize("name", ["standard", "approximate", "non_approximate", "rnd_emb_qk",
                                  "static_emb_qk"])
def test_grouped_query_attention(name):
    """n_kv_heads=2 of 4: K/V projections shrink, outputs keep their shape, and the result equals
    MHA whose K/V weights repeat each group's head."""
    gqa, mha = make(name, kv=2), make(name, kv=0)
    assert gqa.k_proj.out_features == gqa.v_proj.out_features == 2 * DH
    with torch.no_grad():
        for proj in ("q_proj", "o_proj"):
            getattr(mha, proj).load_state_dict(getattr(gqa, proj).state_dict())
        for proj in ("k_proj", "v_proj"):
            w = getattr(gqa, proj).weight.view(2, DH, D).repeat_interleave(2, 0).reshape(HEADS * DH, D)
            b = getattr(gqa, proj).bias.view(2, DH).repeat_interleave(2, 0).reshape(-1)
            getattr(mha, proj).weight.copy_(w)
            getattr(mha, proj).bias.copy_(b)
    h = torch.randn(2, 30, D, dtype=torch.float64)
    out = gqa(h, context(gqa, 30, seed=3))
    assert out.shape == (2, 30, D)
    torch.testing.assert_close(out, mha(h, context(mha, 30, seed=3)))


def test_shared_map_is_computed_once_for_all_rows():
    """RndEmbQK: one (1, heads, L, L) map whatever the batch; each row is that map times its own V."""
    mixer = make("rnd_emb_qk")
    ctx = context(mixer, 25)
    ctx.capture = {}
    h = torch.randn(3, 25, D, dtype=torch.float64)
    out = mixer(h, ctx)
    probs = ctx.capture[0]["probs"]
    assert probs.shape == (1, HEADS, 25, 25)
    expected = mixer.merge(probs @ mixer.project_v(h))
    torch.testing.assert_close(out, expected)
    # Rows do not interact: a row alone gives the same output.
    torch.testing.assert_close(mixer(h[1:2], context(mixer, 25)), out[1:2])


def test_shared_map_needs_the_fixed_stream():
    mixer = make("fixed_seq_qk")
    with pytest.raises(RuntimeError, match="fixed Q/K stream"):
        mixer(torch.randn(1, 4, D, dtype=torch.float64), MixerContext())


def test_non_approximate_decodes_from_the_empty_state():
    """Generation without a prompt: stepping from ``init_state`` gives the parallel form's outputs."""
    mixer = make("non_approximate", kv=2).eval()
    h = torch.randn(3, 20, D, dtype=torch.float64)
    full = mixer(h, MixerContext())
    state = mixer.init_state(3, h)
    assert state["num"].shape == (3, HEADS, DH) and state["den"].shape == state["m"].shape == (3, HEADS)
    outs = []
    for t in range(h.size(1)):
        y, state = mixer.step(h[:, t], state)
        outs.append(y[:, None])
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-10, atol=1e-10)


def test_non_approximate_prompt_ending_on_a_new_maximum_score():
    """The decode state's running maximum is the one at the prompt's last token: a prompt whose last
    token raises the maximum (with scores large enough to matter) must continue exactly."""
    mixer = make("non_approximate").eval()
    with torch.no_grad():
        mixer.q_proj.weight.mul_(4.0)
        mixer.k_proj.weight.mul_(4.0)
    torch.manual_seed(3)
    h = torch.randn(1, 40, D, dtype=torch.float64)
    s, _ = mixer.scores(h)
    running = s.cummax(-1).values
    raised = (s[..., 1:] > running[..., :-1] + 1.0).any(1)[0]  # a head's maximum rises by > 1 at t + 1
    prompt = int(raised.nonzero()[-1]) + 2  # the prompt ends on that token
    assert 2 <= prompt < h.size(1)
    full = mixer(h, MixerContext())
    out, state = mixer.prefill(h[:, :prompt], MixerContext())
    outs = [out]
    for t in range(prompt, h.size(1)):
        y, state = mixer.step(h[:, t], state)
        outs.append(y[:, None])
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-10, atol=1e-10)


def test_non_approximate_in_bfloat16_sums_in_float32():
    """The GPU dtype: bf16 scores and values are averaged in float32 (the same sums as float32 inputs
    give), outputs and the decode state come back in bf16, and left padding gives finite outputs."""
    from leanlm.modeling.mixers.non_approximate import running_softmax_average

    mixer = make("non_approximate").to(torch.bfloat16).eval()
    g = torch.Generator().manual_seed(7)
    h = torch.randn(1, 70, D, generator=g).to(torch.bfloat16)
    s, v = mixer.scores(h)
    assert s.dtype == v.dtype == torch.bfloat16
    got = running_softmax_average(s, v, 16)
    want = running_softmax_average(s.float(), v.float(), 16)
    for a, b in zip(got, want):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    out = mixer(h, MixerContext())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    reference = make("non_approximate")(h.double(), MixerContext())
    assert ((out.double() - reference).norm() / reference.norm()).item() < 2e-2

    pad = 5
    padded = torch.cat([torch.randn(1, pad, D, generator=g).to(torch.bfloat16), h], 1)
    mask = torch.cat([torch.zeros(1, pad), torch.ones(1, h.size(1))], 1).long()
    masked = mixer(padded, MixerContext(attention_mask=mask))
    assert masked.dtype == torch.bfloat16 and torch.isfinite(masked).all()
    torch.testing.assert_close(masked[:, pad:], out, rtol=2e-2, atol=2e-2)

    first, state = mixer.prefill(h[:, :60], MixerContext())
    assert first.dtype == torch.bfloat16
    assert {k: t.dtype for k, t in state.items()} == {"num": torch.bfloat16, "den": torch.bfloat16,
                                                       "m": torch.bfloat16}
    y, state = mixer.step(h[:, 60], state)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    assert {k: t.dtype for k, t in state.items()} == {"num": torch.bfloat16, "den": torch.bfloat16,
                                                       "m": torch.bfloat16}
    torch.testing.assert_close(y, out[:, 60], rtol=2e-2, atol=2e-2)


def _printed_formula(latex: str, **size: int) -> float:
    """Value of a Table 4.5-4.8 formula as printed: juxtaposition is a product binding tighter than
    "/" (``3Bd^2/ht`` = 3Bd^2 / (ht)), ``^`` a power."""
    import re

    expr = re.sub(r"/([A-Za-z]+)", r"/(\1)", latex)
    expr = re.sub(r"(?<=[0-9A-Za-z)])(?=[A-Za-z(])", "*", expr)
    expr = expr.replace("^", "**")
    return eval(expr, {"__builtins__": {}}, dict(size))  # noqa: S307 (our own class attributes)


@pytest.mark.parametrize("name", sorted(CH4_VARIANTS))
def test_formula_methods_equal_their_printed_formulas(name):
    """Tables 4.5-4.8 print a variant's LaTeX formula beside the value its method computes: the two
    must be the same formula (sizes chosen so that swapped or dropped factors change the value)."""
    cls = MIXERS.get(name)
    size = dict(B=2, L=5, d=12, h=3)
    assert cls.complexity(**size) == _printed_formula(cls.complexity_latex, **size)
    for stage in ("prefill", "decode"):
        assert cls.flops(**size, stage=stage) == _printed_formula(cls.flops_latex[stage], **size), stage
    for t in (1, 4):
        assert cls.activation_memory(**size, t=t) == pytest.approx(
            _printed_formula(cls.activation_latex, **size, t=t)), t
    assert cls.cache_size(**size) == _printed_formula(cls.cache_latex, **size)
    # Defaults: FLOPs of the prefill, activations without tensor parallelism (t = 1).
    assert cls.flops(**size) == cls.flops(**size, stage="prefill")
    assert cls.activation_memory(**size) == cls.activation_memory(**size, t=1)


def _on(ctx: MixerContext, device: str) -> MixerContext:
    """The context with its tensors moved to ``device`` (as a GPU run builds them there)."""
    moved = {f: getattr(ctx, f).to(device) for f in ("cos", "sin", "attention_mask", "embeddings")
             if getattr(ctx, f) is not None}
    if ctx.fixed_qk:
        moved["fixed_qk"] = {layer: (q.to(device), k.to(device)) for layer, (q, k) in ctx.fixed_qk.items()}
    return dataclasses.replace(ctx, **moved)


@pytest.mark.parametrize("name", sorted(MIXERS.names()))
def test_mixers_make_their_masks_on_the_inputs_device(name):
    """Masks and running sums a mixer creates itself must be on its input's device, not the CPU default;
    the development machine has no GPU, so the meta device stands in for one (mixing it with a CPU tensor
    is an error, as with CUDA). Forward with padding and a captured map, then prefill and decode steps."""
    mixer = make(name)
    length = 70  # more than one 64-token chunk of the linear forms
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, -5:] = False
    ctx = _on(dataclasses.replace(context(mixer, length), attention_mask=mask, capture={}), "meta")
    mixer = mixer.to("meta")
    h = torch.randn(2, length, D, dtype=torch.float64, device="meta")
    assert mixer(h, ctx).device.type == "meta"
    assert all(t.device.type == "meta" for layer in ctx.capture.values() for t in layer.values())
    if name in DECODING:  # as test_recurrent_form_equals_parallel_form steps, on the meta device
        whole, prompt = _on(context(make(name), length), "meta"), 60
        head = MixerContext(cos=whole.cos[:prompt], sin=whole.sin[:prompt], fixed_qk=whole.fixed_qk,
                            embeddings=None if whole.embeddings is None else whole.embeddings[:, :prompt])
        out, state = mixer.prefill(h[:, :prompt], head)
        emb = None if whole.embeddings is None else whole.embeddings[:, prompt:prompt + 1]
        y, state = mixer.step(h[:, prompt], state, MixerContext(embeddings=emb))
        assert out.device.type == y.device.type == "meta"
        assert all(t.device.type == "meta" for t in state.values() if isinstance(t, torch.Tensor))
