"""The committed reproductions (docs/results/<name>/) and what the docs say of them agree.

The README and docs/claims.md quote each committed run's verdict counts and its claim-by-claim table;
scripts/claims_digest.py prints both from the run's claims.csv. A rerun that changes a verdict without the
docs following (or docs typed by hand) fails here, naming the claim.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
REPORTS = ("smoke", "signal-cpu")


def _digest_module():
    spec = importlib.util.spec_from_file_location("claims_digest", ROOT / "scripts" / "claims_digest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


digest = _digest_module()


@pytest.mark.parametrize("name", REPORTS)
def test_the_readme_quotes_each_reports_counts(name):
    claims = digest.digest(RESULTS / name)
    line = digest.count_line(claims)
    readme = (ROOT / "README.md").read_text()
    entry = next((l for l in readme.split("\n- ") if l.startswith(f"[docs/results/{name}/]")), None)
    assert entry is not None, f"README lists no docs/results/{name}/"
    assert line in " ".join(entry.split()), f"README's counts for {name} are not {line!r}: {entry[:300]}"


def test_docs_claims_tables_are_the_reports_own():
    text = (ROOT / "docs" / "claims.md").read_text()
    signal = digest.digest(RESULTS / "signal-cpu")
    for row in digest.table(signal)[2:]:
        assert row in text, f"docs/claims.md lacks the signal-cpu row {row!r}"
    smoke = digest.digest(RESULTS / "smoke")
    both = digest.side_by_side(smoke, signal, ("smoke", "signal-cpu"))
    for row in both[2:]:
        assert row in text, f"docs/claims.md lacks the side-by-side row {row!r}"
    # each table whole, header first (a table without its header row does not render)
    for block in (digest.table(signal), both):
        assert "\n".join(block) in text, f"docs/claims.md lacks the table starting {block[0]!r} as one block"


@pytest.mark.parametrize("name", REPORTS)
def test_each_report_says_how_it_was_made(name):
    run = json.loads((RESULTS / name / "RUN.json").read_text())
    assert run["command"].startswith("snakemake ") and run["commit"] and run["wall_seconds"] > 0
    for file in run["files"]:
        assert (RESULTS / name / file).is_file(), f"{name}/RUN.json lists {file}, which is not committed"
    assert (RESULTS / name / "tables.pdf").is_file() and (RESULTS / name / "report-front.png").is_file()


def test_the_digest_counts_every_claim_once():
    """Degenerate cases of the digest: the counts add up to the claims, parts run never exceed parts."""
    for name in REPORTS:
        claims = digest.digest(RESULTS / name)
        counts = [int(x.split()[0]) for x in digest.count_line(claims).split(", ")]
        assert sum(counts) == len(claims) == len({c.claim for c in claims})
        assert all(0 <= c.parts_run <= c.parts for c in claims)
