"""Drop the copies of the package in a mutmut work folder whose source is gone (scripts/mutate.sh runs it
before each run).

mutmut copies every module of the package into ``mutants/src`` at each run (mutating the configured ones),
but never removes a copy: a module deleted or renamed since an earlier run stays importable there, so a test
could pass against code that no longer exists. Each such copy is removed (mutmut's ``.meta`` files, its
results, have no source and are kept).

Usage: python scripts/mutation_refresh.py <work folder>   (the folder holding ``src`` and ``mutants``)
"""

from __future__ import annotations

import sys
from pathlib import Path


def stale_copies(work: Path) -> list[Path]:
    """The files under ``work/mutants/src`` without a source under ``work/src`` (mutmut's ``.meta`` files apart)."""
    copies = work / "mutants" / "src"
    if not copies.is_dir():
        return []
    return sorted(p for p in copies.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".meta"
                  and not (work / "src" / p.relative_to(copies)).is_file())


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    stale = stale_copies(work)
    for copy in stale:
        copy.unlink()
    if stale:
        print(f"mutation_refresh: {len(stale)} copies of deleted modules removed from {work / 'mutants' / 'src'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
