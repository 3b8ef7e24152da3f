"""The ``compile`` option (torch.compile of the module that trains): ``"auto"`` by default (compiled on
CUDA, eager elsewhere, so CPU runs and tests are what they were), ``true`` or ``false``; a profile
setting the schema checks (``pretrain.<objective>.compile``, ``finetune.<family>.compile``), passed to the
engine. A compiled tiny decoder trains to the eager losses on CPU, and a compilation that fails trains
eagerly, with the reason logged and in the run summary, and the very losses of an eager run.

Tolerance: relative 1e-5 on each step's loss. Inductor fuses and reorders float32 arithmetic (the
softmax, the LayerNorms, the cross-entropy's reductions), so bit equality is not expected; the
difference measured here was about 1e-7 relative after 3 steps of a 1-layer model. Kept to one layer
and three steps: compiling is the cost (a minute or more on the 2-core CI machine with a cold
inductor cache).
"""

import logging
import shutil

import pytest
import torch

from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.decoder import GPT2ForCausalLM
from leanlm.runs import get_run, pretrain_settings, runs
from leanlm.training import compiling
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.stages.packed_batches import CausalLMBatches
from leanlm.stages.pretrain import pretrain_train_config

from params_files import edit_yaml


def _inductor_missing() -> str | None:
    """Why torch.compile's default backend (inductor) cannot run here, or None."""
    try:
        import torch._inductor  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: no inductor
        return f"torch._inductor cannot be imported ({exc})"
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "inductor's CPU backend needs a C++ compiler (g++/c++/clang++), none is on PATH"
    return None


def trainer(compile, dropout: float = 0.0) -> Trainer:
    rows = torch.randint(0, 64, (40, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = GPT2ForCausalLM(ModelConfig(vocab_size=64, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                                        max_position=16, dropout=dropout, attention_dropout=dropout))
    return Trainer(model, TrainConfig(total_steps=3, lr=1e-3, log_every=1, progress=False, compile=compile),
                   CausalLMBatches(rows, batch_size=4, grad_accum=1, seed=0), None)


def train(compile) -> torch.Tensor:
    run = trainer(compile)
    summary = run.fit()
    assert (run.train_model is not run.model) == (compile is True)  # the compiled wrapper trains, the module is kept
    assert summary["compiled"] == (compile is True) and summary["compile_fallback"] is None
    return run.state.losses


@pytest.mark.skipif(_inductor_missing() is not None, reason=str(_inductor_missing()))
def test_compiled_training_matches_eager_losses():
    eager, compiled = train(False), train(True)
    assert torch.isfinite(compiled).all()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=0)


def test_auto_compiles_on_cuda_only():
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert compiling.compile_wanted("auto", cuda) and not compiling.compile_wanted("auto", cpu)
    assert compiling.compile_wanted(True, cpu) and not compiling.compile_wanted(False, cuda)
    assert TrainConfig.compile == "auto"
    train("auto")  # on this CPU: the eager module trains


def test_auto_compiles_only_runs_that_repay_the_compile():
    """The H200's BERT-base: a 58 s compile for 27 ms a step, repaid after about 2,100 steps. A smoke
    fine-tuning of 10 steps stays eager on CUDA under "auto"; `compile: true` still compiles it."""
    cuda = torch.device("cuda", 0)
    limit = compiling.AUTO_MIN_STEPS
    assert 1000 <= limit <= 5000
    assert not compiling.compile_wanted("auto", cuda, 10)
    assert not compiling.compile_wanted("auto", cuda, limit - 1)
    assert compiling.compile_wanted("auto", cuda, limit) and compiling.compile_wanted("auto", cuda, 10 * limit)
    assert compiling.compile_wanted(True, cuda, 10) and not compiling.compile_wanted(False, cuda, 10 * limit)
    assert not compiling.compile_wanted("auto", torch.device("cpu"), 10 * limit)


def test_the_engine_asks_with_the_runs_length(monkeypatch):
    """The engine passes its run's total steps: a short "auto" run, answered as on CUDA, trains the
    plain module."""
    asked = []
    real = compiling.compile_wanted

    def spy(setting, device, total_steps=None):
        asked.append((setting, total_steps))
        return real(setting, torch.device("cuda", 0), total_steps)

    monkeypatch.setattr(compiling, "compile_wanted", spy)
    train("auto")
    assert asked and asked[0][0] == "auto" and asked[0][1] is not None and asked[0][1] < compiling.AUTO_MIN_STEPS


def test_a_failed_compilation_trains_eagerly_with_the_reason_logged(monkeypatch, caplog):
    """torch.compile compiles lazily, at the first call: the engine probes it on the first micro-batch
    (RNG forked, gradients discarded) and, when compilation fails, trains the eager module. A backend
    that raises stands in for a missing C++ compiler or Triton (dynamo wraps its error as it would
    inductor's); with dropout on, the losses equal an eager run's bit for bit, so the failed attempt
    consumed no random numbers and left no gradient behind."""

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no C++ compiler found (test backend)")

    monkeypatch.setattr(compiling, "BACKEND", broken_backend)
    eager = trainer(False, dropout=0.1)
    eager.fit()
    failing = trainer(True, dropout=0.1)
    with caplog.at_level(logging.WARNING, logger="leanlm.training.compiling"):
        summary = failing.fit()
    assert failing.train_model is failing.model and summary["compiled"] is False
    assert "no C++ compiler found" in summary["compile_fallback"]
    assert any("training eagerly" in r.getMessage() and "no C++ compiler found" in r.getMessage()
               for r in caplog.records)
    assert torch.equal(failing.state.losses, eager.state.losses)


def test_tf32_for_fp32_matmuls_on_cuda_only():
    """On CUDA a run in fp32 lets its matmuls use TF32 (torch.set_float32_matmul_precision("high"));
    a bf16 run keeps IEEE fp32 for the few matmuls it keeps in float32 on purpose (the appendix
    Approximate's sums), and a CPU run is left as it is."""
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert "TF32" not in compiling.set_matmul_precision(torch.device("cpu"), "fp32")
        assert torch.get_float32_matmul_precision() == "highest"
        assert "TF32" in compiling.set_matmul_precision(torch.device("cuda", 0), "fp32")
        assert torch.get_float32_matmul_precision() == "high"
        # the next run in the process sets its own: a bf16 run after an fp32 one is back to IEEE
        assert "IEEE" in compiling.set_matmul_precision(torch.device("cuda", 0), "bf16")
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before)


def test_compile_and_prefetch_are_profile_settings(scratch_root):
    path = scratch_root / "params" / "smoke.yaml"
    config = load_config(path)
    run = next(r for r in runs(config) if r.objective == "mlm")
    default = pretrain_train_config(pretrain_settings(config, run), "x")
    assert default.compile == "auto" and default.prefetch == TrainConfig.prefetch == 2  # auto / on by default

    for value in (True, False, "auto"):
        edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile=value, prefetch=0))
        config = load_config(path)
        chosen = pretrain_train_config(pretrain_settings(config, get_run(config, run.run_id)), "x")
        assert chosen.compile == value and chosen.prefetch == 0

    edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile="yes"))
    with pytest.raises(ConfigError, match=r"pretrain\.mlm\.compile"):
        load_config(path)
    edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile=False, prefetch=-1))
    with pytest.raises(ConfigError, match=r"pretrain\.mlm\.prefetch"):
        load_config(path)
    for bad in (1, "yes", None):
        with pytest.raises(ConfigError, match="TrainConfig.compile"):
            TrainConfig(total_steps=1, lr=1e-3, compile=bad)


def test_fine_tuning_takes_compile_from_its_block(scratch_root):
    from leanlm.stages.finetune import finetune_train_config

    path = scratch_root / "params" / "smoke.yaml"
    glue = load_config(path)["finetune"]["glue"]
    assert finetune_train_config(glue, "rte", "run", 0, 100).compile == "auto"
    edit_yaml(path, lambda d: d["finetune"]["glue"].update(compile=False))
    glue = load_config(path)["finetune"]["glue"]
    assert finetune_train_config(glue, "rte", "run", 0, 100).compile is False
    edit_yaml(path, lambda d: d["finetune"]["glue"].update(compile="on"))
    with pytest.raises(ConfigError, match=r"finetune\.glue\.compile"):
        load_config(path)
