"""`leanlm claims`: every claim's verdict at one profile -> paper_tables/<profile>/claims.{csv,md,tex}.

- claims.csv: one row per part (the comparison, its effect and interval with the interval's level: 95%
  shared simultaneously by the claim's parts, what was resampled, the verdict or why it was not run, and
  the thesis's numbers), with the fewest pretraining runs of its models (``pretraining_runs``) and of the
  claim's (``claim_pretraining_runs``);
- claims.md: per claim the sentence, where it is, the verdict and its parts;
- claims.tex: one table of the claims' verdicts for tables.pdf.

A judged verdict (supported, contradicted, inconclusive) says how many times its models were pretrained
(:func:`verdict_text`): "supported, one pretraining run" is a verdict whose interval does not cover
pretraining variance (profile key ``pretrain_seeds``, docs/claims.md).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import pandas as pd

from leanlm import paths
from leanlm.claims.spec import load_claims
from leanlm.claims.stats import CONTRADICTED, DEFAULT_DRAWS, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE
from leanlm.claims.verdicts import ClaimResult, evaluate_claim
from leanlm.fixed_files import files_fixed
from leanlm.io import write_text

log = logging.getLogger(__name__)
ORDER = (SUPPORTED, CONTRADICTED, INCONCLUSIVE, UNTESTABLE, NOT_RUN)
CSV_COLUMNS = ["claim", "chapter", "where", "claim_verdict", "part", "comparison", "family", "effect", "a", "b",
               "estimate", "low", "high", "level", "region_low", "region_high", "basis", "verdict", "reason",
               "preconditions", "thesis_a", "thesis_b", "pretraining_runs", "claim_pretraining_runs"]
# Verdicts resting on an interval, which say how many pretraining runs it covers
JUDGED = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)


def part_pretraining_runs(p) -> int | None:
    """The fewest pretraining runs of a part's models (None: no interval, or a timing part: family
    ``pretrain``, whose step times do not depend on the pretraining seed)."""
    if p.interval is None or p.part.family == "pretrain":
        return None
    return p.interval.pretraining_runs


def claim_pretraining_runs(cr: ClaimResult) -> int | None:
    """The fewest pretraining runs behind the intervals of a claim's parts (None: no part has one)."""
    runs = [r for r in map(part_pretraining_runs, cr.parts) if r is not None]
    return min(runs) if runs else None


def verdict_text(verdict: str, pretraining_runs) -> str:
    """The verdict as a reader sees it: a judged one with the pretraining runs its interval covers ("supported,
    one pretraining run": pretraining variance not in the interval; "supported, 3 pretraining runs")."""
    if verdict not in JUDGED or pretraining_runs is None or pretraining_runs != pretraining_runs:  # NaN: none
        return verdict
    runs = int(pretraining_runs)
    return f"{verdict}, {'one pretraining run' if runs == 1 else f'{runs} pretraining runs'}"


def uncovered_sentence(results: list[ClaimResult]) -> str:
    """What the intervals do not cover: pretraining variance, where a claim's models were pretrained once. Timing
    claims (their intervals resample timing rounds) have no pretraining runs to speak of."""
    judged = [cr for cr in results if cr.verdict in JUDGED]
    scored = [cr for cr in judged if claim_pretraining_runs(cr) is not None]
    once = sum(1 for cr in scored if claim_pretraining_runs(cr) == 1)
    timing = (" Timing claims resample the timing rounds: a step's time does not depend on the pretraining seed."
              if len(scored) < len(judged) else "")
    if not judged:
        return "No claim was judged at this profile, so no interval is reported."
    if not scored:
        return "Only timing claims were judged at this profile." + timing
    if not once:
        return ("Every judged claim on scores rests on models pretrained several times: its interval resamples the "
                "pretraining seeds too (hierarchical bootstrap)." + timing)
    return (f"{once} judged claim(s) rest on models pretrained once (\"one pretraining run\"): their intervals cover "
            "evaluation examples and fine-tuning seeds, not pretraining variance, which can be larger (a model "
            "pretrained again with another seed may differ by more than the interval's width); the profile key "
            "pretrain_seeds pretrains them several times." + timing)


def count_line(profile: str, c: dict[str, int]) -> str:
    """The one-line count of the claims' verdicts, saying what "inconclusive" and "untestable" mean."""
    return (f"claims at profile {profile}: {c[SUPPORTED]} supported, {c[CONTRADICTED]} contradicted, "
            f"{c[INCONCLUSIVE]} inconclusive (95% interval too wide at this scale), {c[UNTESTABLE]} untestable "
            f"(a precondition does not hold at this scale, e.g. the models are at chance), {c[NOT_RUN]} not run")


def _num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None or math.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{x:.{digits}g}"


def _region(low: float, high: float) -> str:
    return f"({_num(low)}, {_num(high)})"


def evaluate_all(config: dict, draws: int = DEFAULT_DRAWS, claims_file: str | Path | None = None) -> list[ClaimResult]:
    from leanlm.claims.results import Results
    from leanlm.runs import runs

    # each run with the fine-tuning families it runs (a subset may leave some out: signal's cpu, ch3_decoder)
    profile_runs = {run.run_id: frozenset(run.finetune) for run in runs(config)}
    reader = Results(config)  # every record checked once, before any claim uses it (leanlm.claims.results)
    memo: dict = {}  # preconditions shared by several claims are judged once
    with files_fixed():  # one pass: the task files are read once, not once per result (leanlm.fixed_files)
        return [evaluate_claim(claim, config, profile_runs, draws=draws, reader=reader, memo=memo)
                for claim in load_claims(claims_file)]


def to_frame(results: list[ClaimResult]) -> pd.DataFrame:
    rows = []
    for cr in results:
        for i, p in enumerate(cr.parts):
            iv = p.interval
            thesis = p.part.thesis or (None, None)
            rows.append({
                "claim": cr.claim.id, "chapter": cr.claim.chapter, "where": cr.claim.where,
                "claim_verdict": cr.verdict, "part": i + 1, "comparison": p.label, "family": p.part.family,
                "effect": p.part.effect, "a": p.a, "b": p.b,
                "estimate": iv.estimate if iv else None, "low": iv.low if iv else None, "high": iv.high if iv else None,
                "level": iv.level if iv else None,
                "region_low": p.part.region[0], "region_high": p.part.region[1],
                "basis": iv.basis if iv else "", "verdict": p.verdict, "reason": p.reason,
                "preconditions": "; ".join(p.checked), "thesis_a": thesis[0], "thesis_b": thesis[1],
                "pretraining_runs": part_pretraining_runs(p),
                "claim_pretraining_runs": claim_pretraining_runs(cr),
            })
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


def counts(results: list[ClaimResult]) -> dict[str, int]:
    out = {v: 0 for v in ORDER}
    for cr in results:
        out[cr.verdict] += 1
    return out


def summary_lines(profile: str, results: list[ClaimResult]) -> list[str]:
    lines = [count_line(profile, counts(results))]
    for cr in results:
        parts = ", ".join(f"{n} {v}" for v, n in sorted(cr.counts.items(), key=lambda kv: ORDER.index(kv[0])))
        lines.append(f"  {verdict_text(cr.verdict, claim_pretraining_runs(cr)):<12} {cr.claim.id} ({parts})")
    return lines


def markdown(profile: str, results: list[ClaimResult]) -> str:
    out = [f"# The thesis's claims at profile `{profile}`", "",
           "A part is supported or contradicted only when its interval (paired bootstrap over evaluation "
           "examples and seeds; a paired t interval over seeds where no per-example data was kept; for a timing "
           "part, a paired t interval over the timing rounds' log-ratios) lies wholly "
           "inside or wholly outside the effects the claim allows; otherwise it is inconclusive at this scale "
           "(DESIGN.md §8). The intervals of a claim's k parts are simultaneous 95% intervals (each at level "
           "1 - 0.05/k, Bonferroni), so that a claim that holds is contradicted by one of its parts no more "
           "often than 5%. A part is untestable when a precondition the claim needs does not hold at this scale "
           "(e.g. every model at chance), or its interval has no width: it counts neither way. Effects are \"how "
           "much better A is than B\" (see params/claims.yaml). Where a model was pretrained several times "
           "(profile key pretrain_seeds), the interval resamples its pretraining seeds first, paired across models "
           "(hierarchical bootstrap; basis pretraining+...).", "", uncovered_sentence(results), "",
           summary_lines(profile, results)[0], ""]
    for cr in results:
        c = cr.claim
        out += [f"## {c.id}: **{verdict_text(cr.verdict, claim_pretraining_runs(cr))}**", "", f"Chapter {c.chapter}, {c.where}.", "", f"> {c.quote}", ""]
        if c.note:
            out += [f"Note: {c.note}", ""]
        out += [f"Parts ({c.quantifier} must hold):", "",
                "| part | comparison | A | B | effect | interval (level) | allowed | basis | verdict | thesis A / B |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for i, p in enumerate(cr.parts):
            thesis = p.part.thesis or (None, None)
            t = f"{_num(thesis[0])} / {_num(thesis[1])}" if any(v is not None for v in thesis) else ""
            checked = f" (preconditions: {'; '.join(p.checked)})" if p.checked else ""
            if p.interval is None:
                out.append(f"| {i + 1} | {p.label} | | | {p.part.effect} | | {_region(*p.part.region)} | | "
                           f"{p.verdict}: {p.reason} | {t} |")
                continue
            iv = p.interval
            why = f": {p.reason}" if p.reason else ""
            out.append(f"| {i + 1} | {p.label} | {_num(p.a)} | {_num(p.b)} | {p.part.effect} {_num(iv.estimate)} | "
                       f"[{_num(iv.low)}, {_num(iv.high)}] ({100 * iv.level:.4g}%) | {_region(*p.part.region)} | {iv.basis} | "
                       f"{p.verdict}{why}{checked} | {t} |")
        out.append("")
    return "\n".join(out)


# The precondition named in an untestable part's reason (evaluate_part writes "Precondition <name> (<label>) is
# <verdict>"), and how its verdict reads as a basis: only a contradicted precondition "fails".
_UNMET = re.compile(r"Precondition (\w+) \(.*?\) is (contradicted|inconclusive|untestable|not run)\b")
_UNMET_WORDS = {CONTRADICTED: "fails", INCONCLUSIVE: "not shown (inconclusive)", UNTESTABLE: "untestable",
                NOT_RUN: "not run"}


def deciding_index(verdicts: list[str], claim_verdict: str) -> int | None:
    """Which part a claim's verdict rests on: the first part with the claim's verdict; for an inconclusive claim
    without an inconclusive part (supported parts beside untestable ones, under "every") the first untestable
    part, then the first not run; else the first part. None for a claim without parts."""
    for wanted in (claim_verdict, *((UNTESTABLE, NOT_RUN) if claim_verdict == INCONCLUSIVE else ())):
        if wanted in verdicts:
            return verdicts.index(wanted)
    return 0 if verdicts else None


def unmet_basis(verdict: str, reason: str) -> str:
    """The basis of a part that was not judged: the precondition that does not hold, and how ("precondition X
    fails" only where X was contradicted), else "not run" or "no width"."""
    unmet = _UNMET.search(reason or "")
    if unmet:
        return f"precondition {unmet.group(1)} {_UNMET_WORDS[unmet.group(2)]}"
    return "not run" if verdict == NOT_RUN else "no width"


def verdict_basis(cr: ClaimResult) -> str:
    """What a claim's verdict rests on, in a word or two: the basis of its deciding part's interval (what was
    resampled: examples, seeds, pretraining, rounds), or why that part was not judged (:func:`unmet_basis`)."""
    index = deciding_index([p.verdict for p in cr.parts], cr.verdict)
    if index is None:
        return ""
    part = cr.parts[index]
    if part.verdict in (UNTESTABLE, NOT_RUN):
        return unmet_basis(part.verdict, part.reason)
    return part.interval.basis  # a judged part rests on an interval


def latex(profile: str, results: list[ClaimResult]) -> str:
    from leanlm.reporting.latex import render_template

    rows = []
    for cr in results:
        n = cr.counts
        text = verdict_text(cr.verdict, claim_pretraining_runs(cr))
        rows.append({"id": cr.claim.id, "chapter": cr.claim.chapter, "where": cr.claim.where, "verdict": cr.verdict,
                     "pretraining": text[len(cr.verdict):], "basis": verdict_basis(cr), "parts": len(cr.parts),
                     **{v.replace(" ", "_"): n.get(v, 0) for v in ORDER}})
    return render_template("claims.tex.j2", profile=profile, rows=rows, summary=summary_lines(profile, results)[0],
                           uncovered=uncovered_sentence(results))


def main(config: dict, draws: int = DEFAULT_DRAWS, claims_file: str | Path | None = None) -> list[Path]:
    """Evaluate every claim at the profile, write claims.{csv,md,tex}, print the summary."""
    profile = config["profile"]
    results = evaluate_all(config, draws=draws, claims_file=claims_file)
    out_dir = paths.tables_dir(profile)
    written = []
    csv_path = out_dir / "claims.csv"
    write_text(csv_path, to_frame(results).to_csv(index=False))
    written.append(csv_path)
    written.append(write_text(out_dir / "claims.md", markdown(profile, results)))
    written.append(write_text(out_dir / "claims.tex", latex(profile, results)))
    for line in summary_lines(profile, results):
        print(line)
    return written


def print_summary(profile: str, config: dict | None = None) -> None:
    """Print the claims' verdicts of paper_tables/<profile>/claims.csv as a short table (the end of a Snakemake
    run): per claim its verdict and the part that decides it (effect and interval, or the precondition that
    failed), then their count and, with the profile's ``config``, what its scale can test. Nothing when the
    claims stage has not run."""
    path = paths.tables_dir(profile) / "claims.csv"
    if not path.is_file():
        return
    df = pd.read_csv(path)
    claims = df.drop_duplicates("claim")
    verdicts = claims.set_index("claim")["claim_verdict"]
    width = max(len(str(c)) for c in claims["claim"])
    print(f"leanlm: the thesis's claims at profile {profile} (95% intervals; params/claims.yaml):")
    runs = df["claim_pretraining_runs"] if "claim_pretraining_runs" in df.columns else pd.Series(None, index=df.index)
    shown = {c: verdict_text(v, r) for c, v, r in zip(df["claim"], df["claim_verdict"], runs)}
    vwidth = max(12, *(len(t) for t in shown.values()))
    for claim, parts in df.groupby("claim", sort=False):
        verdict = parts["claim_verdict"].iloc[0]
        print(f"  {claim:<{width}}  {shown[claim]:<{vwidth}}  {_deciding_part(parts, verdict)}")
    c = {v: int((verdicts == v).sum()) for v in ORDER}
    print(f"leanlm: {count_line(profile, c)}; details: {path.with_suffix('.md')}")
    once = sum(t.endswith("one pretraining run") for t in shown.values())
    if once:
        print(f"leanlm: {once} verdict(s) rest on models pretrained once: their intervals do not cover pretraining "
              "variance (profile key pretrain_seeds; docs/claims.md)")
    if config is not None:
        print(f"leanlm: {scale_sentence(config, c)}")


def _deciding_part(parts: pd.DataFrame, verdict: str) -> str:
    """The part a claim's verdict rests on (:func:`deciding_index`), in a few words: its effect and interval, or
    for a part not judged the precondition that does not hold."""
    row = parts.iloc[deciding_index(list(parts["verdict"]), verdict)]
    where = f"part {int(row['part'])}/{len(parts)}"
    if row["verdict"] in (UNTESTABLE, NOT_RUN):
        reason = "" if pd.isna(row["reason"]) else str(row["reason"])  # an empty reason reads back as NaN
        basis = unmet_basis(row["verdict"], reason)
        return f"{where}: " + (basis if basis.startswith("precondition") else reason[:70])
    return f"{where}: effect {_num(row['estimate'])} [{_num(row['low'])}, {_num(row['high'])}] ({row['effect']})"


def scale_sentence(config: dict, counts_: dict[str, int]) -> str:
    """What a profile's verdicts can say: below the thesis's scale, a finding about its small models."""
    from leanlm.reporting.tables_pdf import scale_summary

    # the sizes of the runs the profile runs (as a subset narrows it), as the title page and report.html say
    below = scale_summary(config)["short"].endswith("below the thesis's scale")
    judged = counts_[SUPPORTED] + counts_[CONTRADICTED]
    if below:
        return (f"profile {config['profile']} runs below the thesis's scale: its {judged} supported or contradicted "
                f"claims are findings about its small models, not about the thesis, and {counts_[UNTESTABLE]} "
                f"cannot be tested here at all (docs/claims.md)")
    return (f"profile {config['profile']} runs at the thesis's scale: {judged} claims judged, "
            f"{counts_[INCONCLUSIVE]} inconclusive, {counts_[UNTESTABLE]} untestable (docs/claims.md)")
