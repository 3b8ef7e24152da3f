"""No graph breaks in any model's training forward (issue 23): torch.compile, on by default on CUDA
(``compile: auto``), compiles each model as one graph.

A graph break splits the compiled forward at a Python-level operation dynamo cannot trace (a tensor
read back to the host, a data-dependent shape, an ``out=`` into a non-contiguous view): the pieces are
compiled apart, the host waits between them, and nothing is fused across the cut. Each model here is
traced with ``fullgraph=True``, which raises at the first break, on dynamo's ``eager`` backend (the
tracing alone, no inductor code generation: seconds, not minutes; a break is a property of tracing).

The models are tests/test_bf16.py's: one per distinct model of the smoke profile's matrix (ch. 2's hash
embeddings, ch. 3's attention variants in each backbone, ch. 4's mixers in every layout, GQA, q/k norms)
plus every registered ch. 3 attention or ch. 4 mixer the matrix leaves out, reduced here to one per
distinct code path (the sizes do not change what is traced). Each is traced in training mode with the
batches training feeds it: the pretraining batch of its objective (packed rows without an attention
mask, MLM with ``masked_positions``; translation's padded batches with theirs), and, for every model, a
padded batch with an attention mask, as fine-tuning feeds it. The chunked mixers run with 8-token chunks,
so a 16-token batch crosses chunks (the carried states, Approximate's hand-written backward).

The torch here (2.13) traces more than the GPU machine's (2.11): there ``torch.amp.is_autocast_available``
(a C builtin, ``torch._C._is_autocast_available``) was a graph break at every call in the Approximate
decoder (the first GPU check, docs/results/gpu/2026-11-28-h200, D5). Every trace here hides that query
from dynamo as 2.11 did, so a compiled forward that asks it breaks here too.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo

import model_cases as bf16_cases  # the bf16 test's models and batches (tests/model_cases.py)
from leanlm.modeling.mixers import MIXERS
from leanlm.modeling.heads import labelled_positions

# Outside the attention variants and mixers: EELBERT's embedding (ch. 2, related work) embeds each
# distinct token of the batch once (torch.unique, then a loop over blocks of the distinct tokens), a
# data-dependent shape by design. Its model compiles with breaks around the embedding.
KNOWN_BREAKS = {"eelbert": "EELBERT's embedding embeds each distinct token once (torch.unique)"}


def _code_path(fields: dict, head: str) -> str:
    """What decides the traced code: the backbone, its head, the attention or mixer, the embedding, whether
    the layout mixes layer kinds, GQA and q/k norms; not the widths, depths, vocabulary or which layers."""
    key = {name: fields.get(name) for name in ("backbone", "attention", "embedding", "qk_norm",
                                                "tie_word_embeddings", "embedding_options")}
    # Uniform, or standard and simple layers mixed: which layers are which does not change the code.
    key["layout"] = fields.get("layout") in (None, "uniform")
    key["gqa"] = bool(fields.get("n_kv_heads")) and fields.get("n_kv_heads") != fields.get("n_heads")
    return json.dumps([key, head], sort_keys=True, default=str)


def _cases() -> dict[str, tuple[dict, str]]:
    """One case per code path, with at most two layers: dynamo traces every layer, the same code each time
    (two is the least that holds a hybrid layout's simple and standard layer)."""
    distinct: dict[str, str] = {}
    for name, (fields, head) in ALL.items():
        distinct.setdefault(_code_path(fields, head), name)
    cases = {}
    for name in distinct.values():
        fields, head = ALL[name]
        if fields.get("layout") in (None, "uniform", "hybrid"):
            fields = {**fields, "n_layers": min(fields["n_layers"], 2)}
        cases[name] = (fields, head)
    return cases


ALL = bf16_cases.distinct_models()  # every distinct model of the matrix, as test_bf16 takes them
CASES = _cases()


def _batches(padded: dict, head: str) -> list[dict]:
    """The pretraining batch (packed rows, no mask) and the padded one; translation pretrains on padded
    batches, so it has the one."""
    if head == "seq2seq":
        return [padded]
    return [{k: v for k, v in padded.items() if k != "attention_mask"}, padded]


def _traced(model: torch.nn.Module, batch: dict) -> None:
    """Trace the training forward (and loss) as one graph; raises at the first graph break."""
    torch._dynamo.reset()  # a fresh cache: every case is traced, none is served another case's graph
    try:
        out = torch.compile(model, backend="eager", fullgraph=True)(**batch)
    finally:
        torch._dynamo.reset()
    assert torch.isfinite(out["loss"])


@pytest.fixture(autouse=True)
def autocast_query_as_on_torch_2_11(monkeypatch):
    """``torch.amp.is_autocast_available`` as torch 2.11's dynamo saw it: a function it does not trace (a
    graph break; with ``fullgraph=True`` an error). Eager calls answer as before."""
    monkeypatch.setattr(torch.amp, "is_autocast_available", torch._dynamo.disable(torch.amp.is_autocast_available))


@pytest.fixture
def two_chunks(monkeypatch):
    """8-token chunks for the chunked mixers: a 16-token batch is two chunks, the second reading the
    state carried from the first (any chunk size gives the same result; their docstrings)."""
    for name in MIXERS.names():
        if hasattr(MIXERS.get(name), "chunk_size"):
            monkeypatch.setattr(MIXERS.get(name), "chunk_size", bf16_cases.LENGTH // 2)


@pytest.mark.usefixtures("two_chunks")
@pytest.mark.parametrize("case", list(CASES))
def test_training_forward_is_one_graph(case):
    fields, head = CASES[case]
    if fields.get("embedding") in KNOWN_BREAKS:
        pytest.skip(KNOWN_BREAKS[fields["embedding"]])
    model = bf16_cases.build(fields, head)
    padded = bf16_cases.batch_for(model, head)
    if head == "mlm":  # as MLMBatches builds it: the labelled positions counted on the host
        padded["masked_positions"] = labelled_positions(padded["labels"])
    for batch in _batches(padded, head):
        _traced(model, batch)


DECODER_MIXERS = {fields["attention"]: name for name, (fields, head) in reversed(CASES.items())
                  if fields["backbone"] == "qwen" and head == "causal_lm"}


@pytest.mark.usefixtures("two_chunks")
@pytest.mark.parametrize("case", sorted(DECODER_MIXERS.values()))
def test_decoder_forward_under_bf16_autocast_is_one_graph(case):
    """The GPU trains under bf16 autocast, where the mixers ask autocast for their compute dtype
    (RoPE's tables, the Taylor kernel, Linear's scan): one graph there too, per mixer."""
    fields, head = CASES[case]
    model = bf16_cases.build(fields, head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for batch in _batches(bf16_cases.batch_for(model, head), head):
            _traced(model, batch)


def test_every_variant_is_traced():
    """The reduction to code paths keeps every registered attention and mixer, in both layouts."""
    fields = [f for f, _ in CASES.values()]
    assert {f["attention"] for f in fields} == {f["attention"] for f, _ in ALL.values()}
    for name in {f["attention"] for f in fields if f["backbone"] == "qwen"} - {"standard"}:
        assert {"uniform", "hybrid"} <= {f["layout"] for f in fields if f["attention"] == name}, name


@pytest.fixture(params=["cpu tables", "gpu tables"])
def kernel_tables(request):
    """The Taylor kernel's device-dependent choices as on this CPU (one chunk per group, no padding) and as
    on a GPU (every chunk in one group, GEMM operands padded to 16-byte rows): the GPU's grouped backward
    and padded features are code paths of their own (an ``out=`` into a non-contiguous slice there broke
    the compiled graph, found in review after the first GPU check)."""
    if request.param == "cpu tables":
        yield request.param
        return
    from leanlm.memory_probe import _gpu_kernel_choices

    with _gpu_kernel_choices():
        yield request.param


@pytest.mark.usefixtures("two_chunks", "kernel_tables")
@pytest.mark.parametrize("case", ["ch4_uniform-approximate"])
def test_approximate_compiles_through_aot_autograd(case):
    """Tracing is not all of compiling: AOTAutograd then functionalises the graph, forward and backward,
    and the Taylor kernel writes into reused buffers with ``out=`` and in place (its hand-written
    backward too). Compiled with the ``aot_eager`` backend (AOTAutograd without code generation), the
    model trains to eager's loss and gradients; an ``out=`` into unfold's layout failed there. (Every
    other model here passes this too, measured at twice the tracing test's time: Approximate is the one
    with buffers.)"""
    fields, head = CASES[case]
    model = bf16_cases.build(fields, head)
    batch = _batches(bf16_cases.batch_for(model, head), head)[0]
    loss = model(**batch)["loss"]
    loss.backward()
    eager = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    try:
        compiled_loss = torch.compile(model, backend="aot_eager", fullgraph=True)(**batch)["loss"]
        compiled_loss.backward()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, loss)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, eager[name], rtol=1e-4, atol=1e-6, msg=name)


def test_question_answering_trains_as_one_graph():
    """SQuAD fine-tuning compiles (thousands of steps: compile: auto compiles it on CUDA). Its head's check
    that the labelled positions lie inside the input reads a tensor back to the host, a data-dependent
    branch dynamo cannot trace; compiled, the check is left to the loss (found in review)."""
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.models import build_model

    config = ModelConfig(vocab_size=64, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=16,
                         dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = build_model(config, "qa").train()
    ids = torch.randint(4, 64, (3, 12), generator=torch.Generator().manual_seed(0))
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([[1, 3], [0, 0], [5, 11]]))
    _traced(model, batch)
    with pytest.raises(ValueError, match=r"positions outside 0\.\.11"):  # eager keeps its clear message
        model(**{**batch, "labels": torch.tensor([[1, 3], [0, 0], [5, 12]])})
