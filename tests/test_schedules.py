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


def test_one_step_decay_reaches_zero_at_the_end():
    # A decay phase of a single update (total_steps = warmup_steps + 1, or a 1-step run without warmup)
    # must still end at 0: the guard against a zero-length decay may not stretch a 1-step decay.
    assert [schedule_fn("linear", 1)(s) for s in (0, 1)] == [1.0, 0.0]
    f = schedule_fn("linear", WARMUP + 1, WARMUP)
    assert [f(WARMUP), f(WARMUP + 1)] == [1.0, 0.0]
    assert schedule_fn("cosine", WARMUP + 1, WARMUP)(WARMUP + 1) == pytest.approx(0.0)
    assert schedule_fn("cosine_with_hard_restarts", WARMUP + 1, WARMUP)(WARMUP + 1) == 0.0


def test_warmup_over_the_whole_run_is_allowed():
    # warmup_steps == total_steps (warmup_ratio = 1) is valid: the rate rises over the whole run.
    f = schedule_fn("linear", WARMUP, WARMUP)
    assert [f(0), f(WARMUP // 2), f(WARMUP)] == [0.0, pytest.approx(0.5), 1.0]


def test_lr_multiplier_passes_every_setting_to_the_schedule():
    # Values by hand, not against another call of the same function.
    assert lr_multiplier("linear", WARMUP + 50, TOTAL, WARMUP) == pytest.approx(0.5)
    assert lr_multiplier("linear", 5, TOTAL, WARMUP) == pytest.approx(0.5)  # in the warmup
    assert lr_multiplier("cosine_with_hard_restarts", WARMUP + 50, TOTAL, WARMUP, 2) == pytest.approx(1.0)
    assert lr_multiplier("cosine_with_hard_restarts", WARMUP + 75, TOTAL, WARMUP, 2) == pytest.approx(0.5)
    assert lr_multiplier("inverse_sqrt", 40, TOTAL, WARMUP) == pytest.approx(0.5)  # sqrt(10 / 40)


def test_defaults_are_no_warmup_and_one_cycle():
    # Without warmup_steps the schedule starts at its peak; without num_cycles hard restarts is a cosine.
    assert lr_multiplier("linear", 50, 100) == pytest.approx(0.5)
    assert schedule_fn("linear", 100)(0) == 1.0
    assert schedule_fn("linear", 100)(50) == pytest.approx(0.5)
    assert lr_multiplier("cosine_with_hard_restarts", 50, 100) == pytest.approx(0.5)
    assert lr_multiplier("cosine_with_hard_restarts", 75, 100) == pytest.approx(0.5 * (1 + math.cos(0.75 * math.pi)))
    f = schedule_fn("cosine_with_hard_restarts", 100)
    assert f(75) == pytest.approx(0.5 * (1 + math.cos(0.75 * math.pi)))


def test_inverse_sqrt_decays_from_the_peak():
    f = schedule_fn("inverse_sqrt", TOTAL, WARMUP)
    assert f(WARMUP) == 1.0
    assert f(4 * WARMUP) == pytest.approx(0.5)
    # Without warmup: 1 at steps 0 and 1, then 1/sqrt(step).
    g = schedule_fn("inverse_sqrt", TOTAL)
    assert [g(0), g(1), g(4)] == [1.0, 1.0, pytest.approx(0.5)]


def test_warmup_ratio_bounds_are_inclusive():
    assert warmup_steps_from_ratio(100, 0.0) == 0  # no warmup
    assert warmup_steps_from_ratio(100, 1.0) == 100  # warmup over the whole run
    with pytest.raises(ConfigError, match=r"warmup_ratio=1\.5 must lie in \[0, 1\]"):
        warmup_steps_from_ratio(100, 1.5)
    with pytest.raises(ConfigError, match=r"warmup_ratio=-0\.1 must lie in \[0, 1\]"):
        warmup_steps_from_ratio(100, -0.1)


def test_too_long_warmup_error_says_where_to_fix_it():
    with pytest.raises(ConfigError) as info:
        schedule_fn("linear", 100, 101)
    assert str(info.value) == (
        "warmup_steps=101 must lie in [0, total_steps=100]; lower warmup_steps (or warmup_ratio) in the params file"
    )
