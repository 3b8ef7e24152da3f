"""``leanlm.benchmarks.timing.timed_fit``: where its clocks are read against where the device is synchronised.

The engine does not wait for the device between steps, so on CUDA a clock read without a sync measures
what the host has queued, not what the device has done. These tests run on CPU with the sync and the
clock replaced by recorders: the order of the two is what is checked, not any time.
"""

import pytest
import torch

from leanlm.benchmarks import timing
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.decoder import GPT2ForCausalLM
from leanlm.stages.packed_batches import CausalLMBatches
from leanlm.training.engine import TrainConfig


@pytest.fixture
def recorded(monkeypatch):
    """Every sync and clock reading in order; a clock reading returns its own position in that order."""
    events: list[str] = []

    def clock():
        events.append("clock")
        return float(len(events) - 1), 0.0

    monkeypatch.setattr(timing, "_synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(timing, "clock", clock)
    return events


def fit(warmup: int, steps: int = 4):
    rows = torch.randint(0, 64, (40, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = GPT2ForCausalLM(ModelConfig(vocab_size=64, n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                                        max_position=16))
    config = TrainConfig(total_steps=steps, lr=1e-3, progress=False, prefetch=0, compile=False, log_every=steps)
    return timing.timed_fit(model, config, CausalLMBatches(rows, batch_size=4, grad_accum=1, seed=0), warmup,
                            torch.device("cpu"))


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_step_zero_is_timed_to_a_synchronised_device(recorded, warmup):
    """``first_step_s`` ends at the clock read when step 1 starts: the device must have finished step 0
    there, with a warm-up or without one (without, step 1 is inside the timed window, and the sync there was
    missing: the reading measured only what the host had queued)."""
    _, _, first, _, _ = fit(warmup)
    fit_started = recorded.index("clock")  # fit's own clock comes first
    step_one = fit_started + int(first)  # each reading returns its position in `recorded`
    assert recorded[step_one] == "clock" and recorded[step_one - 1] == "sync", recorded


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_the_timed_window_opens_and_closes_on_a_synchronised_device(recorded, warmup):
    seconds, _, _, _, _ = fit(warmup)
    clocks = [i for i, e in enumerate(recorded) if e == "clock"]
    end = clocks[-1]
    start = end - round(seconds * (4 - warmup))  # wall per step x timed steps = the window in positions
    assert start in clocks and recorded[start - 1] == "sync" and recorded[end - 1] == "sync", recorded
