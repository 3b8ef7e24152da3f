#!/usr/bin/env python3
"""Compare the rendered tables and figure data (CSV) of two runs of one profile, e.g. before and after a
refactoring that must not change results (issue 15: the smoke tables before and after the move).

    python scripts/compare_tables.py ROOT_A ROOT_B [--profile smoke] [--ignore-column NAME ...]

Reads ``ROOT/paper_tables/<profile>/*.csv`` of both project roots. A file is *identical* when its bytes are or
when every column parses to equal values; otherwise the columns whose values differ are listed, with the
largest absolute difference of numeric ones.
Columns named by ``--ignore-column`` (measured wall-clock times, which differ between any two runs) are
reported apart and do not count as differences. Exit status: 0 when every file present in both is identical
outside the ignored columns and both hold the same files, else 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def compare_file(a: Path, b: Path, ignored: set[str]) -> tuple[list[str], list[str]]:
    """The differing columns of two CSVs (name with max |difference| where numeric), and the ignored ones
    that differ. A different shape or header is one entry naming both."""
    if a.read_bytes() == b.read_bytes():
        return [], []
    da, db = pd.read_csv(a), pd.read_csv(b)
    if list(da.columns) != list(db.columns) or da.shape != db.shape:
        return [f"shape/header {da.shape} {list(da.columns)} vs {db.shape} {list(db.columns)}"], []
    differing, skipped = [], []
    for column in da.columns:
        x, y = da[column], db[column]
        if x.equals(y):
            continue
        if column in ignored:
            skipped.append(column)
            continue
        detail = column
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            detail += f" (max |diff| {float((x - y).abs().max()):.3g})"
        differing.append(detail)
    return differing, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root_a", type=Path)
    parser.add_argument("root_b", type=Path)
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--ignore-column", action="append", default=[], metavar="NAME",
                        help="a column that may differ (measured times); repeatable")
    args = parser.parse_args(argv)
    dirs = [root / "paper_tables" / args.profile for root in (args.root_a, args.root_b)]
    for folder in dirs:
        if not folder.is_dir():
            parser.error(f"{folder} does not exist: run the {args.profile} profile there first")
    names = [{p.name for p in folder.glob("*.csv")} for folder in dirs]
    ok = names[0] == names[1]
    print(f"{len(names[0])} vs {len(names[1])} CSV files")
    for label, only in (("only in the first", names[0] - names[1]), ("only in the second", names[1] - names[0])):
        if only:
            print(f"{label}: {', '.join(sorted(only))}")
    identical = 0
    for name in sorted(names[0] & names[1]):
        differing, skipped = compare_file(dirs[0] / name, dirs[1] / name, set(args.ignore_column))
        if not differing and not skipped:
            identical += 1
            continue
        if skipped:
            print(f"{name}: measured columns differ (ignored): {', '.join(skipped)}")
        if differing:
            ok = False
            print(f"{name}: DIFFERENT: {', '.join(differing)}")
    print(f"identical: {identical} of {len(names[0] & names[1])}; {'same results' if ok else 'results differ'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
