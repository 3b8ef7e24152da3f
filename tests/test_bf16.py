"""One training step under bf16 autocast for every model the experiment matrix trains (issue 23).

GPU runs train under bf16 autocast (TrainConfig.precision ``auto`` on CUDA), CPU runs in fp32, so a
variant that breaks only under autocast is first seen on the GPU: ch. 4's Approximate mixer crashed at
its first backward there ("expected scalar type Float but found BFloat16"). CPU autocast runs the same
dtype rules, so these tests catch that here: each model takes one forward + loss + backward in the
engine's own autocast (:func:`leanlm.training.precision.training_autocast`) and in fp32, from the same
weights and batch, and the bf16 step must give a finite loss, finite gradients and gradients close to
the fp32 ones.

The models are tests/model_cases.py's: the smoke profile's runs of every params/experiments/*.yaml family
(ch. 2's hash embeddings, ch. 3's attention variants in each backbone they are used with, ch. 4's mixers
in every layout, with GQA and q/k norms where the matrix has them), one case per distinct model, plus any
registered ch. 3 attention or ch. 4 mixer the matrix does not train (each mixer in the uniform and
hybrid layouts, each attention in the BERT encoder): a new variant is covered without editing this file.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from leanlm.config import load_matrix
from leanlm.modeling.attention import ATTENTION
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import MIXERS
from leanlm.modeling.mixers.taylor import taylor_attention
from leanlm.modeling.models import build_model
from leanlm.training.precision import training_autocast

from model_cases import CHUNK, LENGTH, batch_for, build, distinct_models, use_small_chunks  # noqa: E402  (tests/ is on sys.path)

CPU = torch.device("cpu")

# How far the bf16 step's gradient may be from the fp32 one, as ||g_bf16 - g_fp32|| / ||g_fp32|| over
# all parameters at once. bf16 keeps 8 significant bits: each rounding is off by at most 2^-9 = 0.2%
# relative (half an ulp), and one step rounds every matmul's inputs (activations and weights) and
# outputs, in the forward and again in the backward, through up to ~20 matmuls in series (8 layers
# of ch. 4's largest smoke model). Independent errors of that size add to a few percent (measured:
# 0.3-4%, the post-LN encoder-decoder the largest); 10% leaves room for the unlucky tensor, while a
# real defect (a term in the wrong dtype that overflows or cancels, a gradient lost or doubled, a
# wrong sign) is off by order 1 (approximate_per_term's ill-conditioned gradient below: 120-600%).
GRAD_TOLERANCE = 0.10
# The loss is one number, an average: bf16's rounding largely cancels in it (measured: at most 0.2%).
LOSS_TOLERANCE = 0.02


CASES = distinct_models()

# Models whose fp32 gradient at initialisation is itself ill-conditioned, so that no bf16 step can be
# close to it: approximate_per_term divides by the appendix's first-order normaliser q . sum_j k_j
# (eq. 4.15), a sum of terms of both signs that can come arbitrarily close to 0. Measured on these
# smoke models: a gradient norm 70 (hybrid) to 1e5 (uniform) times standard attention's, an fp32
# gradient 0.1-2% off the fp64 one (standard: 3e-7), and rounding the weights to bf16 (fp32 maths)
# moves it by 110-130% (standard: 0.4%). The test checks that ill-conditioning instead of the
# closeness (and finiteness, as for every model).
ILL_CONDITIONED = {"approximate_per_term"}


@pytest.fixture
def small_chunks(monkeypatch):
    use_small_chunks(monkeypatch)


def _step(model: torch.nn.Module, batch: dict, precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    """One training step's loss and gradients, in the engine's autocast for ``precision``."""
    model.zero_grad(set_to_none=True)
    with training_autocast(precision, CPU):
        loss = model(**batch)["loss"]
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("case", list(CASES))
def test_a_bf16_training_step_matches_fp32(case):
    fields, head = CASES[case]
    model = build(fields, head)
    batch = batch_for(model, head)
    loss32, grads32 = _step(model, batch, "fp32")
    loss16, grads16 = _step(model, batch, "bf16")
    assert math.isfinite(loss32) and math.isfinite(loss16), (loss32, loss16)
    assert abs(loss16 - loss32) <= LOSS_TOLERANCE * abs(loss32), (loss16, loss32)
    assert grads16.keys() == grads32.keys()
    bad = [name for name, g in grads16.items() if not torch.isfinite(g).all()]
    assert not bad, f"non-finite bf16 gradients: {bad}"
    assert all(g.dtype == grads32[name].dtype for name, g in grads16.items())
    if fields["attention"] in ILL_CONDITIONED:
        rounded = copy.deepcopy(model)
        with torch.no_grad():
            for p in rounded.parameters():
                p.copy_(p.to(torch.bfloat16))
        moved = _relative_error(_step(rounded, batch, "fp32")[1], grads32)
        assert moved > GRAD_TOLERANCE, (f"{fields['attention']} is well-conditioned now (bf16 weights move "
                                        f"its fp32 gradient by {moved:.3f}): drop it from ILL_CONDITIONED")
        return
    error = _relative_error(grads16, grads32)
    assert error <= GRAD_TOLERANCE, f"relative gradient error {error:.3f} in bf16"


def _relative_error(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """||g - g_ref|| / ||g_ref|| over all parameters' gradients as one vector."""
    flat = torch.cat([grads[name].flatten() for name in reference]).double()
    flat_ref = torch.cat([g.flatten() for g in reference.values()]).double()
    return ((flat - flat_ref).norm() / flat_ref.norm()).item()


def test_the_cases_cover_every_variant_and_layout():
    """Every registered attention and mixer is trained here, every mixer in the uniform and hybrid
    layouts, and the layouts the matrix trains (Table 4.11's) all appear."""
    fields = [f for f, _ in CASES.values()]
    assert {f["attention"] for f in fields} >= set(ATTENTION.names()) | set(MIXERS.names())
    for name in MIXERS.names():
        layouts = {f["layout"] for f in fields if f["backbone"] == "qwen" and f["attention"] == name}
        assert {"uniform", "hybrid"} <= layouts or name == "standard", (name, layouts)
    matrix_layouts = {run_fields.get("layout", experiment.get("defaults", {}).get("layout"))
                      for experiment in load_matrix().values() if experiment["backbone"] == "qwen"
                      for run_fields in experiment["runs"].values()}
    assert matrix_layouts <= {f.get("layout") for f in fields}
    assert {"bert", "gpt2", "transformer", "qwen"} <= {f["backbone"] for f in fields}
    assert any(f.get("embedding", "standard") != "standard" for f in fields)


@pytest.mark.parametrize("group_bytes", [0, 2**30], ids=["cpu-one-chunk-per-group", "gpu-one-group"])
def test_taylor_kernel_trains_under_autocast_from_the_mixers_dtypes(group_bytes):
    """Approximate's kernel as its mixer calls it under bf16 autocast: q and k in float32 (RoPE's
    float32 tables promote the bf16 projections), v in bf16. Its hand-written backward failed on these
    ("expected scalar type BFloat16 but found Float": a GEMM of a bf16 and a float32 operand); now
    each input's gradient comes back finite, in the input's dtype and close to the fp32 kernel's, with
    the chunks grouped as on CPUs and on GPUs."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, LENGTH, 8, generator=g) for _ in range(2))
    v = torch.randn(2, 3, LENGTH, 5, generator=g).to(torch.bfloat16)
    cotangent = torch.randn(2, 3, LENGTH, 5, generator=g)

    def grads(q, k, v, precision):
        inputs = [t.detach().requires_grad_() for t in (q, k, v)]
        with training_autocast(precision, CPU):
            out, _ = taylor_attention(*inputs, chunk=CHUNK, group_bytes=group_bytes)
        (out.float() * cotangent).sum().backward()
        return out, [t.grad for t in inputs]

    out16, grads16 = grads(q, k, v, "bf16")
    out32, grads32 = grads(q, k, v.float(), "fp32")
    assert out16.dtype == torch.bfloat16 and out32.dtype == torch.float32
    assert [t.dtype for t in grads16] == [torch.float32, torch.float32, torch.bfloat16]
    assert all(torch.isfinite(t).all() for t in grads16)
    named = lambda gs: {name: t.float() for name, t in zip("qkv", gs)}  # noqa: E731
    assert _relative_error(named(grads16), named(grads32)) <= GRAD_TOLERANCE
    assert ((out16.float() - out32).norm() / out32.norm()).item() <= GRAD_TOLERANCE


def test_approximate_per_term_has_a_finite_bf16_loss_at_the_papers_width():
    """The appendix's form at qwen_70m's width in params/paper.yaml (d_m 512, 8 heads of 64), two layers
    and 2 x 256 tokens (its own 64-token chunks), at initialisation: its bf16 loss was NaN (5 seeds of
    5 tried; the fp32 loss finite). Summed in bf16, a
    first-order normaliser q . sum_j k_j (measured: -0.064, from terms of both signs whose magnitudes
    add to 155) came out exactly 0 -- the chunk's own part and the earlier chunks' part rounded to
    8.875 and -8.875 in bf16 -- and the division gave inf, then NaN. Its sums now run in
    float32 under autocast."""
    config = ModelConfig(backbone="qwen", vocab_size=512, n_layers=2, d_model=512, n_heads=8, head_dim=64,
                         d_ff=64, max_position=256, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                         layer_norm_eps=1e-6, rope_theta=1e6, attention="approximate_per_term")
    torch.manual_seed(0)
    model = build_model(config, "causal_lm")
    ids = torch.randint(0, 512, (2, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss32 = model(input_ids=ids, labels=ids)["loss"].item()
        with training_autocast("bf16", CPU):
            loss16 = model(input_ids=ids, labels=ids)["loss"].item()
    assert math.isfinite(loss16)
    assert abs(loss16 - loss32) <= LOSS_TOLERANCE * loss32, (loss16, loss32)
