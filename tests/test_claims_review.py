"""The claims' intervals and labels where a review found them wrong (issue 27): the speed parts' interval over
few timing rounds, the hierarchical widening (never narrower, a ratio on its log scale, at Bonferroni levels),
and the words a report puts on a verdict (the deciding part, an unmet precondition, timing-only reports)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from leanlm.claims.stats import (CONTRADICTED, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE, Interval, Measurement,
                                 SeedScores, paired_bootstrap, simultaneous_level)


def _timing(times) -> Measurement:
    times = np.asarray(times, dtype=float)
    return Measurement((SeedScores(seed=0, value=float(np.median(times)), statistic="median",
                                   examples={"score": times}, eval_set="speed-rounds/speed.json"),))


def _ratio(d):  # how many times faster A is than B (ms per sample: lower is better)
    return d["b"] / d["a"]


def _round_world(rng, rounds: int, true_ratio: float, load_sd: float = 0.05, own_sd: float = 0.03):
    """Per-round ms per sample of A and B: a load shared by the round (paired), each model's own noise."""
    load = np.exp(rng.normal(0, load_sd, rounds))
    a = 10.0 * load * np.exp(rng.normal(0, own_sd, rounds))
    b = 10.0 * true_ratio * load * np.exp(rng.normal(0, own_sd, rounds))
    return {"a": _timing(a), "b": _timing(b)}


def _coverage(rounds: int, level: float, trials: int, method) -> float:
    rng = np.random.default_rng(7)
    hits = 0
    for t in range(trials):
        iv = method(_round_world(rng, rounds, true_ratio=1.8), level, t)
        hits += iv.low <= 1.8 <= iv.high
    return hits / trials


def _rounds_t(ms, level, _):
    from leanlm.claims.speed import rounds_interval

    return rounds_interval(ms, _ratio, level)


def _bootstrap(ms, level, t):
    from leanlm.claims.stats import draws_for

    return paired_bootstrap(ms, _ratio, draws=draws_for(level, 300), level=level, seed=t)


@pytest.mark.parametrize("rounds, level", [(5, 0.95), (5, simultaneous_level(10)), (10, 0.95),
                                           (10, simultaneous_level(10))])
def test_the_rounds_interval_covers_the_true_speed_up_at_its_level(rounds, level):
    """A timing part's interval is a paired t interval over the per-round log-ratios (R-1 degrees of
    freedom): it covers the true speed-up at its level with 5 or 10 rounds, at 95% and at a claim's
    Bonferroni level (10 parts: 99.5%)."""
    coverage = _coverage(rounds, level, 400, _rounds_t)
    assert level - 0.025 <= coverage, coverage
    assert coverage <= 0.995 or level > 0.99, coverage


def test_a_bootstrap_over_five_rounds_falls_short_of_a_bonferroni_level():
    """Why the speed parts left the percentile bootstrap: over 5 rounds its interval cannot reach beyond the
    range of the rounds' medians, so at 99.5% it is no wider than at 95% and covers the true speed-up about
    97% of the time, where the t interval covers it at its level."""
    level = simultaneous_level(10)
    assert _coverage(5, level, 400, _bootstrap) < 0.985 <= _coverage(5, level, 400, _rounds_t)


def test_the_rounds_interval_is_a_ratio_interval():
    """The estimate is the geometric mean of the per-round ratios and the bounds are symmetric on the log
    scale (never below 0); the basis says "rounds"; equal per-round ratios give a zero-width interval."""
    from leanlm.claims.speed import rounds_interval

    a = np.array([10.0, 11.0, 9.0, 10.5, 10.0])
    b = a * np.array([2.0, 1.8, 2.2, 1.9, 2.1])
    iv = rounds_interval({"a": _timing(a), "b": _timing(b)}, _ratio, 0.95)
    assert iv.basis == "rounds" and iv.extra["rounds"] == 5
    assert iv.estimate == pytest.approx(np.exp(np.mean(np.log(b / a))))
    assert np.log(iv.high) - np.log(iv.estimate) == pytest.approx(np.log(iv.estimate) - np.log(iv.low))
    from scipy import stats as sps  # t with R - 1 = 4 degrees of freedom over the 5 log-ratios

    logs = np.log(b / a)
    assert np.log(iv.high / iv.estimate) == pytest.approx(sps.t.ppf(0.975, 4) * logs.std(ddof=1) / np.sqrt(5))
    assert 0 < iv.low < iv.estimate < iv.high
    flat = rounds_interval({"a": _timing(a), "b": _timing(2 * a)}, _ratio, 0.95)
    assert flat.width == pytest.approx(0.0, abs=1e-12)
    differences = rounds_interval({"a": _timing(a), "b": _timing(b)}, lambda d: d["b"] - d["a"], 0.95, ratio=False)
    assert differences.estimate == pytest.approx(np.mean(b - a))


def test_rounds_of_different_lengths_are_refused():
    """Rounds that cannot be paired: a caller's error (reading a speed record checks that each run has the
    record's rounds, tests/test_claims_mutants.py), never a silent pairing of the first rounds."""
    from leanlm.claims.speed import rounds_interval

    with pytest.raises(ValueError, match=r"different numbers of rounds \(a 3, b 2\); a speed record times every run"):
        rounds_interval({"a|speed": _timing([1.0, 2.0, 3.0]), "b|speed": _timing([1.0, 2.0])},
                        lambda d: d["b|speed"] / d["a|speed"], 0.95)  # keyed as the claims key a timing side


def test_a_timing_part_is_judged_on_rounds(scratch_root):
    """Through the claims stage, on a speed record of the thesis's Table 2.3 times: the S+R speed-up's basis is
    "rounds" and its estimate the geometric mean of the per-round ratios (the medians stay the sides' values)."""
    from test_claims_every_claim import PROFILE, evaluate, plan_claim, write_world

    from leanlm.claims.spec import load_claims
    from leanlm.config import load_config
    from leanlm.reporting.pretraining_speed import read_speed

    config = load_config(scratch_root / "params" / f"{PROFILE}.yaml")
    claim = next(c for c in load_claims(scratch_root / "params" / "claims.yaml")
                 if c.id == "ch2_shuffle_random_twice_as_fast")
    write_world(scratch_root, config, plan_claim(claim, config))
    (part,) = evaluate(scratch_root, config, claim.id).parts
    record = read_speed(config)["ms_per_sample"]
    ratios = np.array(record["ch2_hashformers-bert_mlm"]) / np.array(record["ch2_hashformers-bert_sr"])
    assert part.interval.basis == "rounds" and part.verdict == SUPPORTED
    assert part.interval.estimate == pytest.approx(np.exp(np.log(ratios).mean()))
    assert (part.a, part.b) == pytest.approx((11.6, 24.9))


def test_widening_never_narrows_the_hierarchical_interval():
    """Where the replicas' own spread is smaller than the hierarchical draws' (fine-tuning noise the
    replicas' means average out), the interval keeps the hierarchical draws' percentile width."""
    from leanlm.claims.hierarchical import widened

    low, high = widened(1.0, 0.6, 1.5, total=4.0, pretraining=0.0, examples=1.0, runs=3, level=0.95)
    assert (low, high) == (0.6, 1.5)
    wider = widened(1.0, 0.6, 1.5, total=1.0, pretraining=1.0, examples=0.0, runs=3, level=0.95)
    assert wider[0] < 0.6 and wider[1] > 1.5
    # a skewed effect's estimate below its percentile interval: scaling the distance would pull low up
    skewed = widened(1.0, 1.1, 2.0, total=1.0, pretraining=4.0, examples=0.0, runs=3, level=0.95)
    assert skewed[0] == 1.1 and skewed[1] > 2.0


def _replicated(per_replica):
    seeds = [tuple(SeedScores(seed=s, value=float(x.mean()), statistic="mean", examples={"score": x}, eval_set="set")
                   for s, x in enumerate(replica)) for replica in per_replica]
    return Measurement(seeds[0], replicas=tuple(seeds[1:]), pretrain_seeds=tuple(range(len(seeds))))


def test_a_widened_ratio_stays_positive():
    """A ratio is widened on its log scale: with pretraining variance that dominates, widening the raw
    scale pushed the lower end of a perplexity ratio below 0."""
    rng = np.random.default_rng(11)
    offsets = [0.3, 1.0, 3.0]  # B's perplexity by pretraining replica: a ratio from about 0.3 to 3
    world = {"a": [[np.exp(rng.normal(0, 0.05, 40)) * 10 for _ in range(2)] for _ in offsets],
             "b": [[np.exp(rng.normal(0, 0.05, 40)) * 10 * o for _ in range(2)] for o in offsets]}
    ms = {k: _replicated(v) for k, v in world.items()}
    iv = paired_bootstrap(ms, lambda d: d["b"] / d["a"], draws=400, ratio=True)
    assert iv.basis.startswith("pretraining") and iv.low > 0, iv
    raw = paired_bootstrap(ms, lambda d: d["b"] / d["a"], draws=400)
    assert raw.low < 0  # the raw scale's widening, kept for effects that are differences


def test_the_hierarchical_interval_covers_at_a_bonferroni_level():
    """The claims judge a claim's k parts at level 1 - 0.05/k: the hierarchical interval's coverage holds there
    too (k = 4: 98.75%), not only at 95%."""
    from test_claims_pretraining import TRUE_EFFECT, _diff, _measurement, _world

    rng = np.random.default_rng(20261129)
    level = simultaneous_level(4)
    datasets, covered = 300, 0
    for i in range(datasets):
        world = _world(rng, 3, seeds=3, n=60, pretrain_sd=1.0)
        iv = paired_bootstrap({k: _measurement(v) for k, v in world.items()}, _diff, draws=1000, level=level, seed=i)
        covered += iv.low <= TRUE_EFFECT <= iv.high
    assert covered / datasets >= 0.97, covered / datasets


# --- the words on a verdict -------------------------------------------------------------------------------

def _part(verdict, basis=None, reason="", family="lm", runs=1):
    iv = None if basis is None else Interval(1.0, 0.5, 1.5, 0.95, 100, basis, pretraining_runs=runs)
    return SimpleNamespace(verdict=verdict, interval=iv, reason=reason, part=SimpleNamespace(family=family))


UNMET = ("untestable at this scale: Attention must use the context. Precondition ch4_lm_in_regime "
         "(ch4_uniform-standard vs ch4_uniform-mlp on lm (wikitext)) is {v}: effect 1.2 [0.9, 1.6] (examples)")


@pytest.mark.parametrize("verdicts, claim, expected", [
    # "every" with a supported and an untestable part is inconclusive: the untestable part decides it
    ([(SUPPORTED, "examples+seeds", ""), (UNTESTABLE, None, UNMET.format(v="inconclusive"))], INCONCLUSIVE,
     "precondition ch4_lm_in_regime not shown (inconclusive)"),
    ([(UNTESTABLE, None, UNMET.format(v="contradicted"))], UNTESTABLE, "precondition ch4_lm_in_regime fails"),
    ([(SUPPORTED, "examples", ""), (INCONCLUSIVE, "pretraining+examples", "")], INCONCLUSIVE, "pretraining+examples"),
    ([(SUPPORTED, "examples", ""), (CONTRADICTED, "seeds", "")], CONTRADICTED, "seeds"),
    ([(NOT_RUN, None, "not run at this profile: x"), (SUPPORTED, "rounds", "")], SUPPORTED, "rounds"),
])
def test_verdict_basis_names_the_part_that_decides(verdicts, claim, expected):
    from leanlm.claims.report import verdict_basis

    cr = SimpleNamespace(verdict=claim, parts=[_part(*v) for v in verdicts])
    assert verdict_basis(cr) == expected


def test_the_run_summary_names_the_same_deciding_part():
    import pandas as pd

    from leanlm.claims.report import _deciding_part

    parts = pd.DataFrame([{"part": 1, "verdict": SUPPORTED, "reason": "", "estimate": 2.0, "low": 1.5, "high": 2.5,
                           "effect": "ratio"},
                          {"part": 2, "verdict": UNTESTABLE, "reason": UNMET.format(v="inconclusive"),
                           "estimate": None, "low": None, "high": None, "effect": "ratio"}])
    assert _deciding_part(parts, INCONCLUSIVE) == "part 2/2: precondition ch4_lm_in_regime not shown (inconclusive)"


def test_a_report_of_timing_claims_only_says_what_their_intervals_resample():
    from leanlm.claims.report import uncovered_sentence

    timing = SimpleNamespace(verdict=SUPPORTED, parts=[_part(SUPPORTED, "rounds", family="pretrain")])
    text = uncovered_sentence([timing])
    assert "No claim was judged" not in text and "timing rounds" in text and text.startswith("Only timing claims")
    both = uncovered_sentence([timing, SimpleNamespace(verdict=SUPPORTED, parts=[_part(SUPPORTED, "pretraining+examples", runs=3)])])
    assert "Every judged claim on scores" in both and "Timing claims resample" in both
    assert uncovered_sentence([SimpleNamespace(verdict=UNTESTABLE, parts=[_part(UNTESTABLE)])]).startswith(
        "No claim was judged")


# Claims judged without any precondition, with why none is needed: each compares with a fixed row, not between
# models that might all be at chance.
NO_PRECONDITION_NEEDED = {
    "ch4_uniform_mlp_perplexity_below_random": "one model against the random-guess row: a model that learned "
                                               "anything is below it, and one that learned nothing is not",
}


def test_every_scored_part_states_what_its_scale_must_reach():
    """A part comparing models' scores (not timing) names a precondition, so a scale where the models are at
    chance makes it untestable, not contradicted (ch3_mha_best_absolute, ch3_fnet_linear_lowest and
    ch3_prr_stable_with_size had none and were judged at smoke)."""
    from leanlm.claims.spec import load_claims

    bare = sorted({c.id for c in load_claims() for p in c.parts if p.family != "pretrain" and not p.conditions})
    assert bare == sorted(NO_PRECONDITION_NEEDED), bare


def test_a_part_across_sizes_checks_both_sizes_references():
    """{experiment_b} names side B's experiment: the PRR-across-sizes parts require both sizes' MHA above
    Majority."""
    from leanlm.claims.spec import load_claims

    claim = next(c for c in load_claims() if c.id == "ch3_prr_stable_with_size")
    for part in claim.parts:
        references = {cond.part.a.runs[0] for cond in part.conditions}
        experiments = {r.split("-")[0] for side in (part.a, part.b) for r in side.runs}
        assert references == {f"{e}-mha" for e in experiments}, references


# --------------------------------------------------------------------------- the report's own words
REASON = ("untestable at this scale: The reference must learn. Precondition ref (ch2_x-r vs majority on glue) is "
          "contradicted: effect -1 [-2, -0.5] (examples)")
CHECKED = "ref: supported (effect 1 [0.5, 2])"


ZERO = ("untestable at this scale: every resample gives the same effect (a zero-width interval, e.g. both sides "
        "score 0 on every example), which is no evidence either way")


def _report_results():
    """Two claims built by hand: an "every" claim with a note, an untestable part then a judged one; a "most"
    claim on ratios, a contradicted part then a zero-width one (an interval and a reason), its models pretrained
    three times."""
    from leanlm.claims.spec import Claim, _part
    from leanlm.claims.verdicts import ClaimResult, PartResult

    glue = {"family": "glue", "tasks": "average", "test": "better", "margin": 0.5}
    guarded = _part(glue, {"a": "ch2_x-a", "b": "ch2_x-c"}, [None, 60.0], "w")
    judged = _part(glue, {"a": "ch2_x-a", "b": "ch2_x-b"}, [81.5, 70.5], "w")
    lm = {"family": "lm", "tasks": ["wikitext103"], "test": "worse", "effect": "ratio", "margin": 1.25}
    ratio, flat = (_part(lm, {"a": a, "b": "ch3_y-b"}, None, "w") for a in ("ch3_y-a", "ch3_y-c"))
    first = ClaimResult(
        Claim("ch2_win", 2, "Table 2.1", "A wins.", "A note.", "every", (guarded, judged)), INCONCLUSIVE,
        [PartResult(guarded, "ch2_x-a vs ch2_x-c on glue", UNTESTABLE, reason=REASON, checked=[CHECKED]),
         PartResult(judged, "ch2_x-a vs ch2_x-b on glue", SUPPORTED, Interval(2.5, 1.25, 3.75, 0.9875, 1000, "examples+seeds"),
                    a=0.75, b=0.625, checked=[CHECKED, "other: supported (effect 2 [1, 3])"])])
    second = ClaimResult(
        Claim("ch3_ratio", 3, "Table 3.2", "B is slower.", "", "most", (ratio, flat)), CONTRADICTED,
        [PartResult(ratio, "ch3_y-a vs ch3_y-b on wikitext103", CONTRADICTED,
                    Interval(0.9, 0.85, 0.95, 0.95, 500, "pretraining+examples", pretraining_runs=3), a=12.5, b=11.5),
         PartResult(flat, "ch3_y-c vs ch3_y-b on wikitext103", UNTESTABLE,
                    Interval(1.0, 1.0, 1.0, 0.95, 500, "pretraining+examples", pretraining_runs=3), a=4.0, b=4.0,
                    reason=ZERO)])
    return [first, second]


COUNT_LINE = ("claims at profile smoke: 0 supported, 1 contradicted, 1 inconclusive (95% interval too wide at this "
              "scale), 0 untestable (a precondition does not hold at this scale, e.g. the models are at chance), 0 not run")
HEADER = ["| part | comparison | A | B | effect | interval (level) | allowed | basis | verdict | thesis A / B |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def test_the_markdown_report_shows_each_claim_and_part_as_written():
    from leanlm.claims.report import markdown, uncovered_sentence

    results = _report_results()
    assert markdown("smoke", results).split("\n") == [
        "# The thesis's claims at profile `smoke`", "",
        "A part is supported or contradicted only when its interval (paired bootstrap over evaluation examples and "
        "seeds; a paired t interval over seeds where no per-example data was kept; for a timing part, a paired t "
        "interval over the timing rounds' log-ratios) lies wholly inside or wholly outside the effects the claim "
        "allows; otherwise it is inconclusive at this scale (DESIGN.md §8). The intervals of a claim's k parts are "
        "simultaneous 95% intervals (each at level 1 - 0.05/k, Bonferroni), so that a claim that holds is "
        "contradicted by one of its parts no more often than 5%. A part is untestable when a precondition the claim "
        "needs does not hold at this scale (e.g. every model at chance), or its interval has no width: it counts "
        "neither way. Effects are \"how much better A is than B\" (see params/claims.yaml). Where a model was "
        "pretrained several times (profile key pretrain_seeds), the interval resamples its pretraining seeds first, "
        "paired across models (hierarchical bootstrap; basis pretraining+...).",
        "", uncovered_sentence(results), "", COUNT_LINE, "",
        "## ch2_win: **inconclusive, one pretraining run**", "", "Chapter 2, Table 2.1.", "", "> A wins.", "",
        "Note: A note.", "", "Parts (every must hold):", "", *HEADER,
        f"| 1 | ch2_x-a vs ch2_x-c on glue | | | difference | | (0.5, inf) | | untestable: {REASON} | - / 60 |",
        f"| 2 | ch2_x-a vs ch2_x-b on glue | 0.75 | 0.625 | difference 2.5 | [1.25, 3.75] (98.75%) | (0.5, inf) | "
        f"examples+seeds | supported (preconditions: {CHECKED}; other: supported (effect 2 [1, 3])) | 81.5 / 70.5 |",
        "",
        "## ch3_ratio: **contradicted, 3 pretraining runs**", "", "Chapter 3, Table 3.2.", "", "> B is slower.", "",
        "Parts (most must hold):", "", *HEADER,
        "| 1 | ch3_y-a vs ch3_y-b on wikitext103 | 12.5 | 11.5 | ratio 0.9 | [0.85, 0.95] (95%) | (0, 0.8) | "
        "pretraining+examples | contradicted |  |",
        f"| 2 | ch3_y-c vs ch3_y-b on wikitext103 | 4 | 4 | ratio 1 | [1, 1] (95%) | (0, 0.8) | pretraining+examples | "
        f"untestable: {ZERO} |  |",
        ""]


def test_the_csv_report_has_a_row_per_part_with_every_column():
    from leanlm.claims.report import CSV_COLUMNS, to_frame

    df = to_frame(_report_results())
    assert list(df.columns) == CSV_COLUMNS and len(df) == 4
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
            for row in df.to_dict("records")]
    assert rows[1] == {
        "claim": "ch2_win", "chapter": 2, "where": "Table 2.1", "claim_verdict": INCONCLUSIVE, "part": 2,
        "comparison": "ch2_x-a vs ch2_x-b on glue", "family": "glue", "effect": "difference", "a": 0.75, "b": 0.625,
        "estimate": 2.5, "low": 1.25, "high": 3.75, "level": 0.9875, "region_low": 0.5, "region_high": np.inf,
        "basis": "examples+seeds", "verdict": SUPPORTED, "reason": "",
        "preconditions": f"{CHECKED}; other: supported (effect 2 [1, 3])", "thesis_a": 81.5, "thesis_b": 70.5,
        "pretraining_runs": 1, "claim_pretraining_runs": 1}
    assert rows[0] == {**rows[1], "part": 1, "comparison": "ch2_x-a vs ch2_x-c on glue", "a": None, "b": None,
                       "estimate": None, "low": None, "high": None, "level": None, "basis": "", "verdict": UNTESTABLE,
                       "reason": REASON, "preconditions": CHECKED, "thesis_a": None, "thesis_b": 60.0,
                       "pretraining_runs": None}
    assert (rows[2]["effect"], rows[2]["region_low"], rows[2]["region_high"]) == ("ratio", 0.0, 0.8)
    assert (rows[2]["thesis_a"], rows[2]["thesis_b"], rows[2]["pretraining_runs"], rows[2]["claim_pretraining_runs"]) == \
        (None, None, 3, 3)
    assert (rows[3]["verdict"], rows[3]["reason"], rows[3]["low"], rows[3]["high"]) == (UNTESTABLE, ZERO, 1.0, 1.0)


def test_the_latex_table_has_a_row_per_claim_with_its_counts_and_basis():
    from leanlm.claims.report import latex

    tex = latex("smoke", _report_results())
    assert r"\caption{The thesis's claims at profile \texttt{smoke}:" in tex
    assert (r"ch2\_win & 2 & Table 2.1 & inconclusive, one pretraining run & precondition ref fails & 2 & 1 & 0 & 0 & "
            r"1 & 0 \\") in tex
    assert r"ch3\_ratio & 3 & Table 3.2 & \textbf{contradicted}, 3 pretraining runs & pretraining+examples & 2 & 0 & 1 & " \
           r"0 & 1 & 0 \\" in tex
    assert "claims at profile smoke: 0 supported, 1 contradicted" in tex
    assert "1 judged claim(s) rest on models pretrained once" in tex


def test_the_summary_printed_and_the_end_of_run_table_read_the_same_verdicts(scratch_root, capsys):
    from leanlm.claims.report import summary_lines, to_frame, print_summary

    results = _report_results()
    assert summary_lines("smoke", results) == [
        COUNT_LINE, "  inconclusive, one pretraining run ch2_win (1 supported, 1 untestable)",
        "  contradicted, 3 pretraining runs ch3_ratio (1 contradicted, 1 untestable)"]
    out = scratch_root / "paper_tables" / "smoke"
    out.mkdir(parents=True)
    to_frame(results).to_csv(out / "claims.csv", index=False)
    print_summary("smoke")
    assert capsys.readouterr().out.splitlines() == [
        "leanlm: the thesis's claims at profile smoke (95% intervals; params/claims.yaml):",
        "  ch2_win    inconclusive, one pretraining run  part 1/2: precondition ref fails",
        "  ch3_ratio  contradicted, 3 pretraining runs   part 1/2: effect 0.9 [0.85, 0.95] (ratio)",
        f"leanlm: {COUNT_LINE}; details: {out / 'claims.md'}",
        "leanlm: 1 verdict(s) rest on models pretrained once: their intervals do not cover pretraining variance "
        "(profile key pretrain_seeds; docs/claims.md)"]

    # a claims.csv written before the pretraining-runs columns: the verdicts alone
    pd.read_csv(out / "claims.csv").drop(columns=["pretraining_runs", "claim_pretraining_runs"]).to_csv(
        out / "claims.csv", index=False)
    print_summary("smoke")
    assert capsys.readouterr().out.splitlines()[1:3] == [
        "  ch2_win    inconclusive  part 1/2: precondition ref fails",
        "  ch3_ratio  contradicted  part 1/2: effect 0.9 [0.85, 0.95] (ratio)"]

    # short verdicts keep a 12-wide column; a part not run shows its reason (70 characters at most), or nothing
    from leanlm.claims.spec import Claim
    from leanlm.claims.verdicts import ClaimResult, PartResult

    part = results[1].parts[0].part
    reason = "not run at this profile: " + ", ".join(f"ch3_y-model_{i}" for i in range(8))
    unrun = [ClaimResult(Claim(cid, 3, "Table 3.2", "Q.", "", "every", (part,)), NOT_RUN,
                         [PartResult(part, "ch3_y-a vs ch3_y-b on wikitext103", NOT_RUN, reason=why)])
             for cid, why in (("ch3_unrun", reason), ("ch3_silent", ""))]
    to_frame(unrun).to_csv(out / "claims.csv", index=False)
    print_summary("smoke")
    assert capsys.readouterr().out.splitlines()[1:3] == [f"  ch3_unrun   not run       part 1/1: {reason[:70]}",
                                                         "  ch3_silent  not run       part 1/1: "]


def test_the_part_a_verdict_rests_on():
    """deciding_index and verdict_basis: the first part with the claim's verdict; for an inconclusive claim
    without an inconclusive part the first untestable, then not run part, else the first part; none without
    parts."""
    from leanlm.claims.report import deciding_index, verdict_basis

    assert deciding_index([SUPPORTED, CONTRADICTED], INCONCLUSIVE) == 0
    assert deciding_index([SUPPORTED, NOT_RUN, UNTESTABLE], INCONCLUSIVE) == 2
    assert deciding_index([SUPPORTED, NOT_RUN], INCONCLUSIVE) == 1
    assert deciding_index([UNTESTABLE, CONTRADICTED], CONTRADICTED) == 1
    assert deciding_index([], SUPPORTED) is None
    assert verdict_basis(SimpleNamespace(verdict=SUPPORTED, parts=[])) == ""
    unrun = SimpleNamespace(verdict=NOT_RUN, parts=[_part(NOT_RUN, reason="no results of ch2_x-a on glue")])
    assert verdict_basis(unrun) == "not run"
    judged = SimpleNamespace(verdict=SUPPORTED, parts=[_part(UNTESTABLE, reason=ZERO), _part(SUPPORTED, "seeds")])
    assert verdict_basis(judged) == "seeds"


@pytest.mark.parametrize("value, shown", [
    (None, "-"), (float("nan"), "-"), (float("inf"), "inf"), (float("-inf"), "-inf"), (0.8125, "0.812"),
    (1234.5, "1.23e+03"), (-0.5, "-0.5"), (3, "3")])
def test_a_number_in_the_report_has_three_significant_digits(value, shown):
    from leanlm.claims.report import _num, _region

    assert _num(value) == shown
    assert _region(value, 2.0) == f"({shown}, 2)"


ONCE = ("{n} judged claim(s) rest on models pretrained once (\"one pretraining run\"): their intervals cover evaluation "
        "examples and fine-tuning seeds, not pretraining variance, which can be larger (a model pretrained again with "
        "another seed may differ by more than the interval's width); the profile key pretrain_seeds pretrains them "
        "several times.")
TIMING = " Timing claims resample the timing rounds: a step's time does not depend on the pretraining seed."
SEVERAL = ("Every judged claim on scores rests on models pretrained several times: its interval resamples the "
           "pretraining seeds too (hierarchical bootstrap).")


@pytest.mark.parametrize("claims, sentence", [
    ([], "No claim was judged at this profile, so no interval is reported."),
    ([(UNTESTABLE, None, "lm", 1), (NOT_RUN, None, "lm", 1)], "No claim was judged at this profile, so no interval is reported."),
    ([(SUPPORTED, "rounds", "pretrain", 1)], "Only timing claims were judged at this profile." + TIMING),
    ([(SUPPORTED, "pretraining+examples", "lm", 3), (CONTRADICTED, "pretraining+seeds", "glue", 2)], SEVERAL),
    ([(SUPPORTED, "pretraining+examples", "lm", 3), (INCONCLUSIVE, "rounds", "pretrain", 1)], SEVERAL + TIMING),
    ([(SUPPORTED, "examples", "lm", 1), (INCONCLUSIVE, "seeds", "glue", 1), (CONTRADICTED, "pretraining+seeds", "glue", 3)],
     ONCE.format(n=2)),
    ([(SUPPORTED, "examples", "lm", 1), (SUPPORTED, "rounds", "pretrain", 1)], ONCE.format(n=1) + TIMING),
])
def test_the_report_says_what_its_intervals_do_not_cover(claims, sentence):
    """Each case of uncovered_sentence, whole: nothing judged; timing claims only; every scored claim pretrained
    several times; some pretrained once (counted); with timing claims beside, what their intervals resample."""
    from leanlm.claims.report import uncovered_sentence

    results = [SimpleNamespace(verdict=v, parts=[_part(v, basis, family=family, runs=runs)])
               for v, basis, family, runs in claims]
    assert uncovered_sentence(results) == sentence


def test_the_claims_stage_writes_its_three_files_and_prints_its_summary(scratch_root, monkeypatch, capsys):
    """report.main: the claims judged with the draws and claims file it is given, claims.csv (no index column),
    claims.md and claims.tex for the profile, the summary printed line by line."""
    from leanlm.claims import report

    results, asked = _report_results(), []
    monkeypatch.setattr(report, "evaluate_all", lambda config, **kw: asked.append(kw) or results)
    written = report.main({"profile": "smoke"}, draws=123, claims_file="params/mine.yaml")
    assert asked == [{"draws": 123, "claims_file": "params/mine.yaml"}]
    out = scratch_root / "paper_tables" / "smoke"
    assert written == [out / "claims.csv", out / "claims.md", out / "claims.tex"]
    assert list(pd.read_csv(out / "claims.csv").columns) == report.CSV_COLUMNS
    assert (out / "claims.md").read_text() == report.markdown("smoke", results)
    assert (out / "claims.tex").read_text() == report.latex("smoke", results)
    assert r"profile \texttt{smoke}" in (out / "claims.tex").read_text()
    assert capsys.readouterr().out.splitlines() == report.summary_lines("smoke", results)


@pytest.mark.parametrize("verdict, reason, basis", [
    (NOT_RUN, "no results of ch2_x-a on glue", "not run"),
    (NOT_RUN, "", "not run"),
    (UNTESTABLE, "untestable at this scale: the interval has no width (every draw gave the same effect)", "no width"),
    (UNTESTABLE, None, "no width"),
    (UNTESTABLE, UNMET.format(v="untestable"), "precondition ch4_lm_in_regime untestable"),
    (NOT_RUN, UNMET.format(v="not run"), "precondition ch4_lm_in_regime not run"),
])
def test_a_part_not_judged_says_why_in_a_word_or_two(verdict, reason, basis):
    from leanlm.claims.report import unmet_basis

    assert unmet_basis(verdict, reason) == basis


def test_counts_and_summary_order_verdicts_as_the_report_does():
    """Claims are counted per verdict (two supported claims are 2), a claim's parts listed in the report's order
    (supported before contradicted, not alphabetically), and a report of no claims still has every CSV column."""
    from leanlm.claims.report import CSV_COLUMNS, counts, summary_lines, to_frame

    first, second = _report_results()
    mixed = SimpleNamespace(claim=SimpleNamespace(id="ch3_mixed"), verdict=INCONCLUSIVE,
                            counts={SUPPORTED: 1, CONTRADICTED: 1, NOT_RUN: 1},
                            parts=[_part(NOT_RUN), _part(CONTRADICTED, "seeds"), _part(SUPPORTED, "seeds")])
    assert counts([first, second, second, mixed]) == {SUPPORTED: 0, CONTRADICTED: 2, INCONCLUSIVE: 2, UNTESTABLE: 0,
                                                      NOT_RUN: 0}
    assert summary_lines("smoke", [mixed])[1] == \
        "  inconclusive, one pretraining run ch3_mixed (1 supported, 1 contradicted, 1 not run)"
    assert list(to_frame([]).columns) == CSV_COLUMNS
