"""Drop the copies of the package in a mutmut work folder that are older than their source (scripts/mutate.sh
runs it before each run).

mutmut copies the package into ``mutants/src`` once and, on later runs, copies a file again only if its copy
is missing: it re-mutates a mutated module whose source changed, but a module it does not mutate (the
config loader, a registry, a new helper's caller) keeps its first copy. The mutants were then run against a
mix of today's mutated modules and yesterday's rest of the package. Removing each stale copy (its source is
newer, or gone) makes mutmut copy it afresh; a mutated module's copy is regenerated either way, since mutmut
re-mutates a source newer than its copy.

Usage: python scripts/mutation_refresh.py <work folder>   (the folder holding ``src`` and ``mutants``)
"""

from __future__ import annotations

import sys
from pathlib import Path


def stale_copies(work: Path) -> list[Path]:
    """The files under ``work/mutants/src`` whose source under ``work/src`` is newer, or missing (mutmut's
    ``.meta`` files, its results, have no source and are kept)."""
    copies = work / "mutants" / "src"
    if not copies.is_dir():
        return []
    stale = []
    for copy in sorted(p for p in copies.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix != ".meta"):  # mutmut's own record of a module's mutants and their results
        source = work / "src" / copy.relative_to(copies)
        if not source.is_file() or source.stat().st_mtime_ns > copy.stat().st_mtime_ns:
            stale.append(copy)
    return stale


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    stale = stale_copies(work)
    for copy in stale:
        copy.unlink()
    if stale:
        print(f"mutation_refresh: {len(stale)} stale copies of the package removed from {work / 'mutants' / 'src'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
