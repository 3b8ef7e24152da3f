"""PRR and PEoP (§3.4.6) against the values the thesis prints, and the seed/family helpers.

Exact attention parameter counts at BERT-base (12 layers; test_analytic checks they are what the
modules count): SHA 8,847,360, MHE 8,875,008, EL-ATT 14,155,776, MQA 15,335,424, SKV 21,233,664,
MHA 28,311,552. The thesis prints them rounded (8.85M, 8.88M, 14.16M, 15.34M, 21.23M, 28.32M).
"""

import itertools

import numpy as np
import pandas as pd
import pytest

from leanlm.errors import LeanLMError
from leanlm.reporting.derived import (
    family_summary,
    glue_average,
    is_inverse,
    peop,
    prr,
    seed_averages,
    task_summary,
    with_efficiency,
)

SHA, MHE, EL_ATT, MQA, SKV, MHA = 8_847_360, 8_875_008, 14_155_776, 15_335_424, 21_233_664, 28_311_552


def _interval(fn, *ranges):
    """Min and max of ``fn`` over the corners of the boxes ``ranges`` (fn is monotone in each)."""
    values = [fn(*corner) for corner in itertools.product(*ranges)]
    return min(values), max(values)


def _printed(x, half=0.05):
    return (x - half, x + half)


# --------------------------------------------------------------------------- inverse: Table 3.2 (PPL)
# WIKITEXT-103 and PENN TREEBANK perplexities; the PEoPs are reproduced *exactly* (to the printed two
# decimals) from the printed perplexities and the exact counts. Rounded counts would not do it: with
# 8.88M/8.85M, MHE-MUL's WIKITEXT-103 PEoP would be 39.02, not the printed 42.32.
TABLE_3_2_PPL = {
    # attention: params, wikitext (ppl, prr, peop), ptb (ppl, prr, peop)
    "MHA": (MHA, (43.0, 100.0, 0.14), (44.3, 100.0, 0.16)),
    "EL-ATT": (EL_ATT, (57.1, 67.2, 0.13), (56.1, 73.4, 0.29)),
    "MQA": (MQA, (49.7, 84.4, 0.27), (49.3, 88.7, 0.38)),
    "SKV": (SKV, (46.2, 92.6, 0.18), (45.5, 97.3, 0.24)),
    "MHE-ADD": (MHE, (54.0, 74.4, 41.29), (55.3, 75.2, 60.15)),
    "MHE-MUL": (MHE, (53.8, 74.9, 42.32), (50.7, 85.6, 81.76)),
}
SHA_PPL = {"wikitext": 62.0, "ptb": 68.1}
MHA_PPL = {"wikitext": 43.0, "ptb": 44.3}


@pytest.mark.parametrize("attention", sorted(TABLE_3_2_PPL))
def test_inverse_prr_and_peop_reproduce_table_3_2_exactly(attention):
    params, *benchmarks = TABLE_3_2_PPL[attention]
    for key, (ppl, printed_prr, printed_peop) in zip(["wikitext", "ptb"], benchmarks):
        assert round(prr(ppl, MHA_PPL[key], inverse=True), 1) == printed_prr
        assert round(peop(ppl, SHA_PPL[key], params, SHA, inverse=True), 2) == printed_peop


def test_rounded_counts_would_not_reproduce_table_3_2():
    assert round(peop(53.8, 62.0, 8.88e6, 8.85e6, inverse=True), 2) == 39.02
    assert round(peop(53.8, 62.0, MHE, SHA, inverse=True), 2) == 42.32


def test_inverse_prr_of_sha_perplexity():
    # SHA's printed PRRs (55.8 and 46.3): 1 - (62.0 - 43.0) / 43.0 and 1 - (68.1 - 44.3) / 44.3.
    assert prr(62.0, 43.0, inverse=True) == pytest.approx(100 * (1 - 19.0 / 43.0))
    assert round(prr(62.0, 43.0, inverse=True), 1) == 55.8
    assert round(prr(68.1, 44.3, inverse=True), 1) == 46.3
    # lower perplexity than MHA retains more than 100 %
    assert prr(40.0, 43.0, inverse=True) > 100.0


# --------------------------------------------------------------------------- direct: Table 3.1
def test_direct_peop_reproduces_table_3_1_squad_exactly():
    # SQUAD v1.1 / v2.0 F1, SHA 82.5 / 67.6: printed PEoPs MHE-ADD 4.65 / 19.88, MHE-MUL 13.19 / 22.25,
    # MHA 0.03 / 0.06, with the exact counts.
    assert round(peop(83.7, 82.5, MHE, SHA), 2) == 4.65
    assert round(peop(85.9, 82.5, MHE, SHA), 2) == 13.19
    assert round(peop(71.8, 67.6, MHE, SHA), 2) == 19.88
    assert round(peop(72.3, 67.6, MHE, SHA), 2) == 22.25
    assert round(peop(88.6, 82.5, MHA, SHA), 2) == 0.03
    assert round(peop(77.0, 67.6, MHA, SHA), 2) == 0.06
    assert round(prr(67.6, 77.0), 1) == 87.8


def test_mhe_mul_glue_peop_within_rounding_of_the_printed_scores():
    # MHE-MUL GLUE: score 80.6, SHA 79.2, params 8.88M vs 8.85M, printed PEoP 5.53. From the printed
    # (rounded) averages the formula gives 5.66 with the exact counts and 5.21 with the rounded ones,
    # so the thesis computed it from unrounded averages: 5.53 lies inside the range the exact counts
    # give for scores within +-0.05 of the printed ones, and outside it for the rounded counts' range.
    assert peop(80.6, 79.2, MHE, SHA) == pytest.approx((80.6 / 79.2 - 1) / (MHE / SHA - 1))
    lo, hi = _interval(lambda s, r: peop(s, r, MHE, SHA), _printed(80.6), _printed(79.2))
    assert lo <= 5.53 <= hi
    # The per-task means of Table 3.5 (also rounded) give 5.55 / MHE-ADD 4.95 vs the printed 5.53 / 4.92.
    glue_35 = {
        "SHA": [80.5, 87.5, 86.7, 63.6, 90.7, 85.1, 53.8, 85.8],
        "MHE-ADD": [81.5, 87.8, 87.2, 66.9, 90.5, 87.2, 54.7, 87.7],
        "MHE-MUL": [81.9, 87.9, 87.4, 67.1, 91.1, 85.4, 56.6, 87.3],
    }
    sha = np.mean(glue_35["SHA"])
    assert peop(np.mean(glue_35["MHE-MUL"]), sha, MHE, SHA) == pytest.approx(5.53, abs=0.05)
    assert peop(np.mean(glue_35["MHE-ADD"]), sha, MHE, SHA) == pytest.approx(4.92, abs=0.05)


TABLE_3_1_GLUE = {  # attention: (params, acc, printed prr, printed peop)
    "SHA": (SHA, 79.2, 96.7, None),
    "MHA": (MHA, 81.9, 100.0, 0.02),
    "EL-ATT": (EL_ATT, 80.3, 98.0, 0.02),
    "MQA": (MQA, 81.3, 99.2, 0.04),
    "SKV": (SKV, 81.4, 99.4, 0.02),
    "MHE-ADD": (MHE, 80.4, 98.2, 4.92),
    "MHE-MUL": (MHE, 80.6, 98.3, 5.53),
}


@pytest.mark.parametrize("attention", sorted(TABLE_3_1_GLUE))
def test_table_3_1_glue_prr_and_peop_within_rounding(attention):
    params, acc, printed_prr, printed_peop = TABLE_3_1_GLUE[attention]
    lo, hi = _interval(lambda s, m: prr(s, m), _printed(acc), _printed(81.9))
    assert lo - 0.05 <= printed_prr <= hi + 0.05
    if printed_peop is None:
        assert np.isnan(peop(acc, 79.2, params, SHA))  # SHA is the reference: "-"
    else:
        lo, hi = _interval(lambda s, r: peop(s, r, params, SHA), _printed(acc), _printed(79.2))
        assert lo - 0.005 <= printed_peop <= hi + 0.005


def test_prr_and_peop_direct_values():
    assert prr(79.2, 81.9) == pytest.approx(100 * 79.2 / 81.9)
    assert prr(81.9, 81.9) == 100.0
    assert peop(80.0, 80.0, MHE, SHA) == 0.0
    assert peop(70.0, 80.0, MHE, SHA) < 0  # worse than SHA with more parameters
    # the inverse form is the negated direct form
    assert peop(50.0, 60.0, MHE, SHA, inverse=True) == pytest.approx(-peop(50.0, 60.0, MHE, SHA))
    # arrays work element-wise
    out = prr(np.array([79.2, 81.9]), 81.9)
    assert out.shape == (2,) and out[1] == 100.0


# --------------------------------------------------------------------------- helpers on the tidy table
def _tidy(values: dict, tasks=("sst2", "cola"), seeds=(0, 1)) -> pd.DataFrame:
    """values[run][task][seed] = primary metric in 0..1; one extra non-primary row per result."""
    from leanlm.data.tasks import get_task

    params = {"sha": 100, "mha": 300, "mhe_mul": 104}
    rows = []
    for run, per_task in values.items():
        for task in tasks:
            for seed in seeds:
                common = dict(profile="smoke", experiment="ch3_encoder", run=run, run_id=f"ch3_encoder-{run}",
                              family="glue", attention=run, task=task, seed=seed, params_total=10 * params[run],
                              params_attention=params[run], params_embedding=5)
                # each task's real primary metric (sst2: accuracy, cola: matthews), as aggregation writes it
                primary = get_task(task).primary_metric
                rows.append({**common, "metric": primary, "value": per_task[task][seed], "is_primary": True})
                other = next(m for m in get_task(task).metrics if m != primary) if len(get_task(task).metrics) > 1 else "f1"
                rows.append({**common, "metric": other, "value": 0.0, "is_primary": False})
    return pd.DataFrame(rows)


VALUES = {
    "sha": {"sst2": [0.80, 0.82], "cola": [0.40, 0.44]},
    "mha": {"sst2": [0.90, 0.90], "cola": [0.50, 0.56]},
    "mhe_mul": {"sst2": [0.85, 0.85], "cola": [0.45, 0.49]},
}


def test_seed_averages_and_glue_average():
    tidy = _tidy(VALUES)
    per_seed = seed_averages(tidy, "glue").set_index(["run", "seed"])["score"]
    assert per_seed[("sha", 0)] == pytest.approx(60.0)  # (80 + 40) / 2
    assert per_seed[("sha", 1)] == pytest.approx(63.0)  # (82 + 44) / 2
    summary = glue_average(tidy).set_index("run")
    assert summary.loc["sha", "mean"] == pytest.approx(61.5)
    assert summary.loc["sha", "std"] == pytest.approx(np.std([60.0, 63.0], ddof=1))
    assert summary.loc["mha", "mean"] == pytest.approx(71.5)
    assert summary.loc["mha", "n_seeds"] == 2
    assert summary.loc["mhe_mul", "params_attention"] == 104


def test_with_efficiency_uses_the_mha_and_sha_runs():
    summary = with_efficiency(family_summary(_tidy(VALUES), "glue")).set_index("run")
    assert summary.loc["mha", "prr"] == pytest.approx(100.0)
    assert summary.loc["sha", "prr"] == pytest.approx(100 * 61.5 / 71.5)
    assert np.isnan(summary.loc["sha", "peop"])
    # mhe_mul: mean 66.0 (= (85 + 45 + 85 + 49) / 4); PEoP = (66/61.5 - 1) / (104/100 - 1)
    assert summary.loc["mhe_mul", "peop"] == pytest.approx((66.0 / 61.5 - 1) / 0.04)


def test_task_summary_is_per_task_mean_and_std():
    out = task_summary(_tidy(VALUES), "glue").set_index(["run", "task"])
    assert out.loc[("mha", "cola"), "mean"] == pytest.approx(53.0)
    assert out.loc[("mha", "cola"), "std"] == pytest.approx(100 * np.std([0.50, 0.56], ddof=1))


def test_a_seed_missing_a_task_is_an_error_not_a_biased_average():
    tidy = _tidy(VALUES)
    tidy = tidy[~((tidy["run"] == "mha") & (tidy["seed"] == 1) & (tidy["task"] == "cola"))]
    with pytest.raises(LeanLMError, match=r"ch3_encoder-mha seed 1 task cola"):
        glue_average(tidy)
    with pytest.raises(LeanLMError, match="mnli"):
        glue_average(_tidy(VALUES), tasks=["sst2", "cola", "mnli"])


def test_unknown_family_is_a_clear_error():
    with pytest.raises(LeanLMError, match="superglue.*families present: glue"):
        family_summary(_tidy(VALUES), "superglue")


# --------------------------------------------------------------------------- edge cases of the formulas
def test_peop_is_nan_only_at_shas_parameter_count():
    # Same count as SHA but a different score: still undefined ("-"), not an infinity.
    assert np.isnan(peop(81.0, 79.2, SHA, SHA))
    assert np.isnan(peop(77.0, 79.2, SHA, SHA, inverse=True))
    # Twice SHA's count (growth exactly 1): defined, the plain relative score gain.
    assert peop(88.0, 80.0, 2 * SHA, SHA) == pytest.approx(0.1)
    out = peop(np.array([81.0, 88.0]), 80.0, np.array([SHA, 2 * SHA]), SHA)
    assert np.isnan(out[0]) and out[1] == pytest.approx(0.1)


def test_undefined_peop_raises_no_numpy_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(peop(81.0, 79.2, SHA, SHA))  # x / 0
        assert np.isnan(peop(79.2, 79.2, SHA, SHA))  # 0 / 0


def test_missing_values_give_nan_not_an_error():
    # A score or count that is missing (None, e.g. a run without results) yields NaN, printed "-".
    out = prr([80.0, None], 80.0)
    assert out[0] == 100.0 and np.isnan(out[1])
    assert np.isnan(prr(80.0, None))
    out = peop([88.0, None], 80.0, [2 * SHA, 2 * SHA], SHA)
    assert out[0] == pytest.approx(0.1) and np.isnan(out[1])
    assert np.isnan(peop(88.0, None, 2 * SHA, SHA))
    assert np.isnan(peop(88.0, 80.0, None, SHA))
    assert np.isnan(peop(88.0, 80.0, 2 * SHA, None))


# --------------------------------------------------------------------------- tidy-table helpers, more
def _lm_tidy(ppl: dict, metric="perplexity", family="lm", tasks=("wikitext103", "ptb")) -> pd.DataFrame:
    """ppl[run] = {task: [per-seed values]}: a lower-is-better family as the aggregate stage writes it."""
    params = {"sha": 100, "mha": 300, "mhe_mul": 104}
    rows = []
    for run, per_task in ppl.items():
        for task in tasks:
            for seed, value in enumerate(per_task[task]):
                rows.append(dict(profile="smoke", experiment="ch3_decoder", run=run, run_id=f"ch3_decoder-{run}",
                                 family=family, attention=run, task=task, seed=seed, params_total=10 * params[run],
                                 params_attention=params[run], params_embedding=5, metric=metric, value=value,
                                 is_primary=True))
    return pd.DataFrame(rows)


PPL = {
    "sha": {"wikitext103": [62.0, 64.0], "ptb": [68.0, 70.0]},
    "mha": {"wikitext103": [43.0, 45.0], "ptb": [44.0, 46.0]},
    "mhe_mul": {"wikitext103": [54.0, 54.0], "ptb": [51.0, 51.0]},
}


def test_perplexities_are_averaged_as_stored_not_times_100():
    tidy = _lm_tidy(PPL)
    per_seed = seed_averages(tidy, "lm").set_index(["run", "seed"])
    assert per_seed.loc[("sha", 0), "score"] == pytest.approx(65.0)  # (62 + 68) / 2, not x 100
    assert per_seed.loc[("sha", 0), "n_tasks"] == 2
    out = task_summary(tidy, "lm").set_index(["run", "task"])
    assert out.loc[("mha", "ptb"), "mean"] == pytest.approx(45.0)
    assert out.loc[("mha", "ptb"), "n_seeds"] == 2
    # while fractions in the same table are shown x 100
    mixed = pd.concat([tidy, _tidy(VALUES)], ignore_index=True)
    assert seed_averages(mixed, "glue").set_index(["run", "seed"]).loc[("sha", 0), "score"] == pytest.approx(60.0)
    assert seed_averages(mixed, "lm").set_index(["run", "seed"]).loc[("sha", 0), "score"] == pytest.approx(65.0)


def test_is_inverse_follows_the_primary_metric():
    assert is_inverse(_lm_tidy(PPL), "lm") is True
    assert is_inverse(_tidy(VALUES), "glue") is False
    assert is_inverse(_lm_tidy(PPL, metric="bits_per_byte"), "lm", tasks=["ptb"]) is True
    assert is_inverse(_lm_tidy(PPL), "lm", tasks=["no_such_task"]) is False  # nothing to invert


def test_is_inverse_rejects_a_family_mixing_directions():
    mixed = pd.concat([_lm_tidy(PPL, tasks=("wikitext103",)),
                       _lm_tidy({run: {"lambada": [0.6, 0.62]} for run in PPL}, metric="accuracy", tasks=("lambada",))],
                      ignore_index=True)
    with pytest.raises(LeanLMError) as info:
        is_inverse(mixed, "lm")
    assert str(info.value) == (
        "family 'lm' mixes higher- and lower-is-better primary metrics (accuracy, perplexity); "
        "average and compare them separately"
    )
    # a task subset of one direction is fine
    assert is_inverse(mixed, "lm", tasks=["wikitext103"]) is True
    assert is_inverse(mixed, "lm", tasks=["lambada"]) is False


def test_with_efficiency_uses_the_inverse_forms_for_perplexity():
    summary = with_efficiency(family_summary(_lm_tidy(PPL), "lm"), inverse=True).set_index("run")
    # means: sha 66.0, mha 44.5, mhe_mul 52.5
    assert summary.loc["sha", "prr"] == pytest.approx(prr(66.0, 44.5, inverse=True))
    assert summary.loc["sha", "prr"] == pytest.approx(100 * (1 - (66.0 - 44.5) / 44.5))
    assert summary.loc["mhe_mul", "peop"] == pytest.approx(-(52.5 / 66.0 - 1) / 0.04)
    assert summary.loc["mhe_mul", "peop"] > 0  # lower perplexity with more parameters: positive elasticity


def test_with_efficiency_without_a_reference_run_gives_nan_columns():
    tidy = _tidy(VALUES)
    no_mha = with_efficiency(family_summary(tidy[tidy["run"] != "mha"], "glue"))
    assert list(no_mha.columns[-2:]) == ["prr", "peop"]
    assert no_mha["prr"].isna().all() and no_mha["prr"].dtype == float
    assert no_mha["peop"].notna().any()
    no_sha = with_efficiency(family_summary(tidy[tidy["run"] != "sha"], "glue"))
    assert no_sha["peop"].isna().all() and no_sha["peop"].dtype == float
    assert no_sha["prr"].notna().all()


def test_with_efficiency_refuses_a_summary_of_two_experiments():
    summary = family_summary(_tidy(VALUES), "glue")
    two = pd.concat([summary, summary.assign(experiment="ch3_other")], ignore_index=True)
    with pytest.raises(LeanLMError) as info:
        with_efficiency(two)
    assert str(info.value) == (
        "PRR/PEoP compare runs of one experiment, but the summary mixes ch3_encoder, ch3_other; "
        "select one experiment first"
    )


def test_summaries_keep_the_run_order_of_the_table():
    # Tables print runs in the experiment matrix's order (SHA before MHA), not alphabetically.
    tidy = _tidy(VALUES)
    order = ["sha", "mha", "mhe_mul"]
    assert seed_averages(tidy, "glue")["run"].tolist() == [r for r in order for _ in (0, 1)]
    assert glue_average(tidy)["run"].tolist() == order
    assert task_summary(tidy, "glue")[["run", "task"]].values.tolist() == [
        [r, t] for r in order for t in ("sst2", "cola")
    ]


def test_missing_results_error_lists_eight_in_table_order():
    tidy = _tidy(VALUES)
    tidy = tidy[~((tidy["task"] == "cola") & (tidy["run"] != "mhe_mul"))]  # sha and mha lack cola
    with pytest.raises(LeanLMError) as info:
        glue_average(tidy, tasks=["sst2", "cola"])
    assert str(info.value) == (
        "family 'glue': 4 (run, seed, task) results are missing (ch3_encoder-sha seed 0 task cola; "
        "ch3_encoder-sha seed 1 task cola; ch3_encoder-mha seed 0 task cola; ch3_encoder-mha seed 1 task cola); "
        "rerun the fine-tuning job of those runs"
    )
    many = _tidy({run: {task: [v[0]] * 5 for task, v in per_task.items()} for run, per_task in VALUES.items()},
                 seeds=range(5))
    many = many[~((many["task"] == "cola") & (many["run"] != "mhe_mul"))]  # 10 missing
    with pytest.raises(LeanLMError) as info:
        glue_average(many, tasks=["sst2", "cola"])
    message = str(info.value)
    assert message.startswith("family 'glue': 10 (run, seed, task) results are missing (")
    assert message.count(" task cola") == 8  # only the first eight are listed
    assert "ch3_encoder-mha seed 2 task cola); rerun" in message


def test_unknown_family_error_in_full():
    with pytest.raises(LeanLMError) as info:
        family_summary(_tidy(VALUES), "superglue")
    assert str(info.value) == (
        "no primary-metric results for task family 'superglue' in the tidy table; families present: glue. "
        "Run the fine-tuning stage for it, then `leanlm aggregate`"
    )
    both = pd.concat([_tidy(VALUES), _lm_tidy(PPL)], ignore_index=True)
    with pytest.raises(LeanLMError, match=r"families present: glue, lm\. Run"):
        family_summary(both, "superglue")
    with pytest.raises(LeanLMError, match=r"families present: none\. Run"):
        family_summary(_tidy(VALUES).iloc[0:0], "glue")
