"""The ``compile`` option (torch.compile of the module that trains): a profile setting the schema checks
(``pretrain.<objective>.compile``, default off), passed to the engine, and on CPU a compiled tiny decoder
trains to the eager losses.

Tolerance: relative 1e-5 on each step's loss. Inductor fuses and reorders float32 arithmetic (the
softmax, the LayerNorms, the cross-entropy's reductions), so bit equality is not expected; the
difference measured here was about 1e-7 relative after 3 steps of a 1-layer model. Kept to one layer
and three steps: compiling is the cost (a minute or more on the 2-core CI machine with a cold
inductor cache).
"""

import shutil

import pytest
import torch

from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.decoder import GPT2ForCausalLM
from leanlm.runs import get_run, pretrain_settings, runs
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.pretrain import CausalLMBatches, pretrain_train_config

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


def train(compile: bool) -> torch.Tensor:
    rows = torch.randint(0, 64, (40, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = GPT2ForCausalLM(ModelConfig(vocab_size=64, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                                        max_position=16, dropout=0.0, attention_dropout=0.0))
    trainer = Trainer(model, TrainConfig(total_steps=3, lr=1e-3, log_every=1, progress=False, compile=compile),
                      CausalLMBatches(rows, batch_size=4, grad_accum=1, seed=0), None)
    trainer.fit()
    assert (trainer.train_model is not model) == compile  # the compiled wrapper trains, the module is kept
    return trainer.state.losses


@pytest.mark.skipif(_inductor_missing() is not None, reason=str(_inductor_missing()))
def test_compiled_training_matches_eager_losses():
    eager, compiled = train(False), train(True)
    assert torch.isfinite(compiled).all()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=0)


def test_compile_and_prefetch_are_profile_settings(scratch_root):
    path = scratch_root / "params" / "smoke.yaml"
    config = load_config(path)
    run = next(r for r in runs(config) if r.objective == "mlm")
    default = pretrain_train_config(pretrain_settings(config, run), "x")
    assert default.compile is False and default.prefetch == TrainConfig.prefetch == 2  # off / on by default

    edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile=True, prefetch=0))
    config = load_config(path)
    chosen = pretrain_train_config(pretrain_settings(config, get_run(config, run.run_id)), "x")
    assert chosen.compile is True and chosen.prefetch == 0

    edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile="yes"))
    with pytest.raises(ConfigError, match=r"pretrain\.mlm\.compile"):
        load_config(path)
    edit_yaml(path, lambda d: d["pretrain"]["mlm"].update(compile=False, prefetch=-1))
    with pytest.raises(ConfigError, match=r"pretrain\.mlm\.prefetch"):
        load_config(path)
    with pytest.raises(ConfigError, match="TrainConfig.compile"):
        TrainConfig(total_steps=1, lr=1e-3, compile=1)
