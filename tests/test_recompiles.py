"""torch.compile compiles the training step once per run, whatever the batches' shapes (GPU check D3, D4).

On CUDA the engine compiles (``compile: auto``). dynamo compiles a graph for the shapes it first sees
and, when an input's size changes, recompiles with that dimension symbolic ("automatic dynamic"):
with inductor each graph of a BERT-base costs tens of seconds, which the first GPU check paid inside
the timed steps (MLM's masked-position count changes every batch; fine-tuning pads every batch to its
own longest example). The batch builders therefore declare which dimensions vary
(``varying_dims``), and the engine marks those dynamic before the first compiled call: one graph
serves the whole run.

Counted through the real engine (its probe, its loop, its evaluation) with a backend that counts the
graphs it is given (torch._dynamo.testing.CompileCounter) on top of dynamo's ``aot_eager`` path, which
traces forward and backward through AOTAutograd like inductor (so the shape guards those add are met
here too) but generates no code: seconds on a CPU. The dynamo cache is reset before each test, so no
graph is served from another test; within the fine-tuning family test it is kept across tasks, as in
one ``leanlm finetune`` job.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.debugging import aot_eager

from leanlm.errors import TrainingError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.heads import labelled_positions
from leanlm.modeling.models import build_model
from leanlm.objectives.shuffle_random import ShuffleRandomBatches
from leanlm.runners.multiple_choice import ChoiceBatches
from leanlm.stages.finetune import TaskBatches, predict
from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches
from leanlm.training import compiling
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.text_batches import padded_dims
from leanlm.training.translation_pairs import TranslationBatches, collate_pairs

VOCAB, SPECIAL = 96, [0, 1, 2, 3, 4]  # ids 0-4: [PAD], [UNK], [CLS], [SEP], [MASK]
MAX_POSITION, BATCH, STEPS = 48, 4, 6


class CountingBackend:
    """torch.compile backend: ``aot_eager``, counting the graphs dynamo hands it (one per compiled frame
    and shape specialisation, the unit of a recompilation)."""

    def __init__(self):
        self.graphs, self.inner = 0, aot_eager

    def __call__(self, graph, example_inputs):
        self.graphs += 1
        return self.inner(graph, example_inputs)


@pytest.fixture
def backend(monkeypatch):
    torch._dynamo.reset()
    counting = CountingBackend()
    monkeypatch.setattr(compiling, "BACKEND", counting)
    yield counting
    torch._dynamo.reset()


def config(backbone: str, **extra) -> ModelConfig:
    fields = dict(backbone=backbone, vocab_size=VOCAB, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                  max_position=MAX_POSITION, dropout=0.0, attention_dropout=0.0)
    return ModelConfig.from_dict({**fields, **extra})


def model(backbone: str, head: str, **head_kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {"bert": {"type_vocab_size": 2}, "gpt2": {},
             "transformer": {"n_decoder_layers": 1, "type_vocab_size": 0}}[backbone]
    return build_model(config(backbone, **extra), head, **head_kwargs)


def train(module, batches, compile=True, steps=STEPS, evaluate=None, eval_every=None) -> Trainer:
    trainer = Trainer(module, TrainConfig(total_steps=steps, lr=1e-3, log_every=1, progress=False, prefetch=0,
                                          compile=compile, eval_every=eval_every), batches, None, evaluate=evaluate)
    trainer.fit()
    return trainer


def shapes(batches, key: str, dim: int, steps: int = STEPS) -> set[int]:
    return {batches(step, 0)[key].shape[dim] for step in range(steps)}


def packed_rows(count: int = 64) -> torch.Tensor:
    rows = torch.randint(5, VOCAB, (count, 32), generator=torch.Generator().manual_seed(0))
    rows[:, 0], rows[:, -1] = 2, 3
    return rows


def encoded_examples(count: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """[CLS] a [SEP] b [SEP] pairs of varied lengths, up to the position table's length (BERT's
    ``position_ids[:, :L]`` slice meets its end, where a guard could split the lengths in two)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, MAX_POSITION - 3, (count,), generator=generator).tolist()
    lengths[0] = MAX_POSITION - 3  # one batch padded to the whole table
    out = []
    for n in lengths:
        a, b = n // 2, n - n // 2
        ids = [2] + torch.randint(5, VOCAB, (a,), generator=generator).tolist() + [3]
        ids += torch.randint(5, VOCAB, (b,), generator=generator).tolist() + [3]
        out.append((ids, [0] * (a + 2) + [1] * (b + 1)))
    return out


def test_mlm_pretraining_compiles_once_though_the_masked_count_varies(backend):
    """D3: BertForMLM scores only the masked positions, whose number differs from batch to batch."""
    batches = MLMBatches(packed_rows(), SPECIAL, 4, VOCAB, BATCH, 1, 0.15, seed=0)
    assert len(shapes(batches, "masked_positions", 0)) > 2  # the shape this test is about does vary
    run = train(model("bert", "mlm"), batches)
    assert run.compiled and backend.graphs == 1 and run.summary()["compiled_graphs"] == 1


def test_packed_pretraining_compiles_once(backend):
    """Causal LM and ch. 2's Shuffle+Random read full packed rows: one shape, one graph (and none marked
    dynamic, so the compiler keeps specialising on the fixed sizes)."""
    rows = packed_rows()
    for module, batches in ((model("gpt2", "causal_lm"), CausalLMBatches(rows, BATCH, 1, seed=0)),
                            (model("bert", "shuffle_random"),
                             ShuffleRandomBatches(rows, SPECIAL, VOCAB, BATCH, 1, 0.1, 0.1, seed=0))):
        before = backend.graphs
        assert not getattr(batches, "varying_dims", lambda batch: {})(batches(0, 0))
        assert train(module, batches).compiled and backend.graphs == before + 1, type(batches).__name__


def glue_run(num_labels: int, encoded, evaluate_too: bool = True, compile=True) -> Trainer:
    regression = num_labels == 1
    labels = [float(i % 5) if regression else i % num_labels for i in range(len(encoded))]
    module = model("bert", "classification", num_labels=num_labels)
    # Evaluated every second step on every example in batches of 8, the last one smaller.
    evaluate = (lambda m: {"n": len(predict(m, encoded, 0, regression, batch_size=8))}) if evaluate_too else None
    return train(module, TaskBatches(encoded, labels, BATCH, 1, 0, 0, regression), compile=compile,
                 evaluate=evaluate, eval_every=2 if evaluate_too else None)


def test_fine_tuning_with_padded_lengths_and_evaluation_compiles_once(backend):
    """D4: every batch is padded to its own longest example; evaluation (eval mode, no_grad, a smaller
    last batch) runs the plain module, so it adds no graph either. The losses are an eager run's."""
    encoded = encoded_examples(37)
    batches = TaskBatches(encoded, [0] * len(encoded), BATCH, 1, 0, 0, False)
    assert len(shapes(batches, "input_ids", 1)) > 2 and len(encoded) % 8  # lengths vary; a smaller last eval batch
    compiled = glue_run(3, encoded)
    assert compiled.compiled and backend.graphs == 1
    assert [h["step"] for h in compiled.state.history if "eval" in h] == [2, 4, 6]
    eager = glue_run(3, encoded, compile=False)
    torch.testing.assert_close(compiled.state.losses, eager.state.losses, rtol=1e-6, atol=0)


def test_a_fine_tuning_family_compiles_once_per_head(backend):
    """One ``leanlm finetune`` job trains every task of a family in one process. dynamo keeps its graphs
    on the model's forward code across the tasks' Trainers: a task whose head has the shapes and label
    type of an earlier one reuses its graph, the others compile one more. So the family stays within
    dynamo's recompile limit (past it dynamo silently runs the forward eagerly for the rest of the
    process); GLUE's heads: 3 classes (MNLI), 2 (QNLI, QQP, RTE, ...), regression (STS-B)."""
    encoded = encoded_examples(40, seed=1)
    counts = []
    for num_labels in (3, 2, 2, 2, 1, 2):
        before = backend.graphs
        run = glue_run(num_labels, encoded, evaluate_too=False)
        assert run.compiled and run.summary()["compiled_graphs"] == backend.graphs - before
        counts.append(backend.graphs - before)
    assert counts == [1, 1, 0, 0, 1, 0]
    assert backend.graphs < torch._dynamo.config.recompile_limit


def test_multiple_choice_compiles_once(backend):
    """COPA's (B, C, L) batches: the padded length is the last dimension."""
    encoded = encoded_examples(60, seed=2)
    choices = [encoded[2 * i: 2 * i + 2] for i in range(30)]
    batches = ChoiceBatches(choices, [i % 2 for i in range(30)], BATCH, seed=0, pad_id=0)
    assert len(shapes(batches, "input_ids", 2)) > 2
    assert train(model("bert", "multiple_choice"), batches).compiled and backend.graphs == 1


class EqualFirst(TranslationBatches):
    """Translation batches whose first (the one compiled first) has source and target of one length."""

    def __call__(self, step: int, micro: int) -> dict:
        if step == 0:
            return collate_pairs([([7] * 9 + [3], [8] * 9)] * BATCH)  # 10 source ids, <s> + 9 target ids
        return super().__call__(step, micro)


def test_translation_compiles_once_though_both_lengths_vary(backend):
    """Ch. 3's translation pretraining pads source and target apart: two lengths, varying independently.
    They are equal in the first batch, which must not tie them into one symbol (dynamo's "duck sizing")."""
    generator = torch.Generator().manual_seed(3)
    pairs = []
    for _ in range(40):
        source, target = torch.randint(4, 20, (2,), generator=generator).tolist()
        pairs.append((torch.randint(5, VOCAB, (source,), generator=generator).tolist() + [3],
                      torch.randint(5, VOCAB, (target,), generator=generator).tolist()))
    batches = EqualFirst(pairs, BATCH, 1, seed=0)
    first = batches(0, 0)
    assert first["input_ids"].shape[1] == first["decoder_input_ids"].shape[1]
    assert len(shapes(batches, "input_ids", 1)) > 2 and len(shapes(batches, "decoder_input_ids", 1)) > 2
    module = model("transformer", "seq2seq")
    assert train(module, batches).compiled and backend.graphs == 1


def test_a_batch_builder_declaring_a_missing_input_is_an_error(backend):
    """A ``varying_dims`` out of step with the batch it describes fails at once, naming the input."""

    class Declares(CausalLMBatches):
        def varying_dims(self, batch):
            return {"attention_mask": (1,)}

    with pytest.raises(TrainingError, match="Declares.varying_dims names input 'attention_mask'"):
        train(model("gpt2", "causal_lm"), Declares(packed_rows(), BATCH, 1, seed=0))


def _encoders() -> dict[str, tuple[dict, str]]:
    """tests/test_graph_breaks.py's cases (one per code path of the matrix's models) with the BERT
    encoder: the models whose training batches vary (MLM's masked count; every encoder is fine-tuned on
    padded batches). The decoders train on full rows and fixed windows only; ch. 4's chunked mixers
    (Approximate, Non-approximate) would even compile per length, splitting it into chunks."""
    import test_graph_breaks

    return {name: case for name, case in test_graph_breaks.CASES.items()
            if case[0]["backbone"] == "bert" and case[0].get("embedding") not in test_graph_breaks.KNOWN_BREAKS}


ENCODERS = _encoders()


@pytest.mark.parametrize("case", list(ENCODERS))
def test_every_encoder_compiles_one_graph_for_every_length(case, backend):
    """Each encoder of the matrix (ch. 2's hash embeddings, ch. 3's attention variants) meets lengths
    16, 12 and 9 with masked counts to match in one graph: no attention, embedding or mask path
    pins the marked sizes (maybe_mark_dynamic would let it, one graph per length). Traced by dynamo
    alone (the model code is what could pin a size; AOTAutograd's guards are the engine tests' above):
    a third of aot_eager's time over the 25 models."""
    import model_cases

    backend.inner = lambda graph, example_inputs: graph.forward
    fields, head = ENCODERS[case]
    module = model_cases.build(fields, head)
    full = model_cases.batch_for(module, head)
    compiled = torch.compile(module, backend=compiling.BACKEND)
    for length in (16, 12, 9):
        batch = {k: v[:, :length].contiguous() if v.dim() > 1 else v for k, v in full.items()}
        dims = padded_dims(batch)
        if head == "mlm":  # as MLMBatches builds it
            batch["masked_positions"] = labelled_positions(batch["labels"])
            dims["masked_positions"] = (0,)
        compiling.mark_varying(batch, dims, case)
        compiled(**batch)["loss"].backward()
    assert backend.graphs == 1


def test_the_compiled_bench_step_compiles_once_and_says_so(backend):
    """``leanlm bench --compile`` (the GPU check's compiled BERT-base): its step on prebuilt MLM batches
    compiles one graph, as the loop does, and the record says how many (``compiled_graphs``), so a GPU
    run shows a recompilation where there is one."""
    from leanlm.benchmarks import pretraining as bench

    result = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=4, warmup=1, device="cpu", compile=True)
    assert result["compiled"] and backend.graphs == 1
    # The loop's trainer is served the graph the step's compiled (same code, same shapes): none of its own.
    assert result["compiled_graphs"] == 0


def test_the_gpu_checks_compiled_loop_compiles_once(backend):
    """The GPU check's compiled BERT sub-steps run the loop alone (``loop_only``) with a profiled step
    after the timed ones: that loop's batch source must declare the masked count too, or the second
    batch recompiles (the review of the first GPU fixes found 2 graphs here)."""
    from leanlm.benchmarks import pretraining as bench

    result = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=3, warmup=1, device="cpu", compile=True,
                             loop_only=True, profile_steps=1)
    assert result["compiled"] and backend.graphs == 1 and result["compiled_graphs"] == 1


def test_span_labels_are_not_a_length():
    """SQuAD's labels are (B, 2) start and end positions: dimension 1 is no padded length, so only the
    inputs are declared varying (found in review)."""
    from leanlm.stages.finetune import TaskBatches

    batch = {"input_ids": torch.zeros(2, 9, dtype=torch.long), "attention_mask": torch.ones(2, 9, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 9, dtype=torch.long), "labels": torch.tensor([[1, 2], [3, 4]])}
    assert TaskBatches.varying_dims(None, batch) == {"input_ids": (1,), "attention_mask": (1,),
                                                     "token_type_ids": (1,)}
