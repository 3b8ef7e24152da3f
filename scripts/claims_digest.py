"""The claims tables of docs/claims.md and the README's counts, from committed reports' claims.csv.

    python scripts/claims_digest.py docs/results/signal-cpu            # one report: count line and table
    python scripts/claims_digest.py docs/results/smoke docs/results/signal-cpu   # side by side

A committed report (docs/results/<name>/, written by scripts/collect_results.py) keeps the claims stage's
claims.csv: one row per part, with the claim's verdict. This prints what the docs quote of it, so the docs
are pasted from the files rather than typed, and tests/test_committed_reports.py checks that every verdict
and count the docs print is the one its claims.csv holds. Nothing here computes a verdict.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ORDER = ("supported", "contradicted", "inconclusive", "untestable", "not run")
# Verdicts that rest on an interval: the report says how many pretraining runs it covers
JUDGED = ("supported", "contradicted", "inconclusive")


@dataclass(frozen=True)
class ClaimDigest:
    claim: str
    where: str
    verdict: str          # as the report prints it ("supported, one pretraining run")
    parts: int
    parts_run: int        # parts with a verdict other than "not run"
    part_counts: dict


def _verdict_text(verdict: str, runs) -> str:
    if verdict not in JUDGED or runs is None or runs != runs:  # NaN: no interval
        return verdict
    runs = int(runs)
    return f"{verdict}, {'one pretraining run' if runs == 1 else f'{runs} pretraining runs'}"


def digest(report: Path) -> list[ClaimDigest]:
    """Each claim of ``report``/claims.csv in file order."""
    df = pd.read_csv(Path(report) / "claims.csv")
    out = []
    for claim, parts in df.groupby("claim", sort=False):
        first = parts.iloc[0]
        runs = first["claim_pretraining_runs"] if "claim_pretraining_runs" in parts.columns else None
        counts = {v: int((parts["verdict"] == v).sum()) for v in ORDER if (parts["verdict"] == v).any()}
        out.append(ClaimDigest(claim=str(claim), where=str(first["where"]),
                               verdict=_verdict_text(str(first["claim_verdict"]), runs), parts=len(parts),
                               parts_run=int((parts["verdict"] != "not run").sum()), part_counts=counts))
    return out


def count_line(claims: list[ClaimDigest]) -> str:
    """"2 supported, 1 contradicted, ...": the claims' verdicts (without the pretraining runs), in ORDER."""
    bare = [c.verdict.split(",")[0] for c in claims]
    return ", ".join(f"{bare.count(v)} {v}" for v in ORDER)


def table(claims: list[ClaimDigest]) -> list[str]:
    rows = ["| claim | where | verdict | parts run: their verdicts |", "|---|---|---|---|"]
    for c in claims:
        counts = ", ".join(f"{n} {v}" for v, n in c.part_counts.items() if v != "not run") or "-"
        rows.append(f"| `{c.claim}` | {c.where} | **{c.verdict}** | {c.parts_run} of {c.parts}: {counts} |")
    return rows


def side_by_side(left: list[ClaimDigest], right: list[ClaimDigest], names: tuple[str, str]) -> list[str]:
    by_claim = {c.claim: c for c in right}
    rows = [f"| claim | where | {names[0]} | parts run | {names[1]} | parts run |", "|---|---|---|---|---|---|"]
    for c in left:
        r = by_claim.get(c.claim)
        other = f"**{r.verdict}** | {r.parts_run}/{r.parts}" if r else "- | -"
        rows.append(f"| `{c.claim}` | {c.where} | **{c.verdict}** | {c.parts_run}/{c.parts} | {other} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="docs/results/<name> folders (one or two)")
    args = parser.parse_args(argv)
    if len(args.reports) > 2:
        parser.error("one report, or two side by side")
    digests = [digest(r) for r in args.reports]
    for report, claims in zip(args.reports, digests):
        print(f"{report}: {count_line(claims)}")
    print()
    lines = table(digests[0]) if len(digests) == 1 else side_by_side(
        digests[0], digests[1], (args.reports[0].name, args.reports[1].name))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
