"""The claims report's own words (leanlm.claims.report): the markdown, every CSV column, the LaTeX rows, the
printed summary and end-of-run table, the deciding part and what the intervals do not cover, on claims built by
hand, each output checked whole. Fast and in mutmut's selection (docs/mutation-testing.md): the every-claim test
reached most of this alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from leanlm.claims.stats import CONTRADICTED, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE, Interval
from test_claims_review import UNMET, _part
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
