"""Learning-rate schedules: multipliers at known steps (thesis Tables 3.11 / 3.12 conventions)."""

import math

import pytest

from leanlm.errors import ConfigError
from leanlm.training.schedules import lr_multiplier, schedule_fn, warmup_steps_from_ratio

TOTAL, WARMUP = 110, 10


@pytest.mark.parametrize("name", ["linear", "cosine", "cosine_with_hard_restarts", "constant"])
def test_warmup_rises_linearly_from_zero_to_one(name):
    f = schedule_fn(name, TOTAL, WARMUP)
    assert f(0) == 0.0
    assert f(5) == pytest.approx(0.5)
    assert f(WARMUP) == pytest.approx(1.0)
    assert all(f(s) < f(s + 1) for s in range(WARMUP))


def test_linear_decays_to_zero_at_the_end():
    f = schedule_fn("linear", TOTAL, WARMUP)
    assert f(WARMUP + 50) == pytest.approx(0.5)  # half of the 100 post-warmup steps
    assert f(TOTAL - 1) == pytest.approx(0.01)
    assert f(TOTAL) == 0.0
    assert f(TOTAL + 20) == 0.0  # never negative


def test_cosine_is_half_at_mid_and_zero_at_end():
    f = schedule_fn("cosine", TOTAL, WARMUP)
    assert f(WARMUP + 25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert f(WARMUP + 50) == pytest.approx(0.5)
    assert f(TOTAL) == pytest.approx(0.0)


def test_hard_restarts_jump_back_to_one():
    f = schedule_fn("cosine_with_hard_restarts", TOTAL, WARMUP, num_cycles=2)
    assert f(WARMUP) == pytest.approx(1.0)
    assert f(WARMUP + 25) == pytest.approx(0.5)  # middle of the first cycle
    assert f(WARMUP + 49) < 0.01  # end of the first cycle
    assert f(WARMUP + 50) == pytest.approx(1.0)  # the restart
    assert f(WARMUP + 75) == pytest.approx(0.5)
    assert f(TOTAL) == 0.0


def test_hard_restarts_with_one_cycle_equal_cosine():
    for step in range(TOTAL + 1):
        assert lr_multiplier("cosine_with_hard_restarts", step, TOTAL, WARMUP, 1) == pytest.approx(
            lr_multiplier("cosine", step, TOTAL, WARMUP)
        )


def test_constant_and_no_warmup():
    f = schedule_fn("constant", TOTAL, 0)
    assert [f(s) for s in (0, 50, TOTAL)] == [1.0, 1.0, 1.0]
    assert schedule_fn("linear", 100, 0)(0) == 1.0


def test_warmup_from_ratio_is_six_percent_rounded_up():
    assert warmup_steps_from_ratio(1000, 0.06) == 60
    assert warmup_steps_from_ratio(101, 0.06) == 7  # ceil(6.06)
    with pytest.raises(ConfigError):
        warmup_steps_from_ratio(100, 1.5)


def test_bad_settings_are_config_errors_naming_the_value():
    with pytest.raises(ConfigError, match="cosine_with_hard_restarts"):  # the known names are listed
        schedule_fn("polynomial", 100, 0)
    with pytest.raises(ConfigError, match="warmup_steps=200"):
        schedule_fn("linear", 100, 200)
    with pytest.raises(ConfigError, match="num_cycles=0"):
        schedule_fn("cosine_with_hard_restarts", 100, 0, num_cycles=0)
