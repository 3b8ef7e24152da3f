"""Bring a mutmut work folder up to date with the sources and tests before a run (scripts/mutate.sh runs it
first). Two things mutmut keeps from an earlier run would otherwise be stale:

- **Copies of deleted modules.** mutmut copies every module of the package into ``mutants/src`` at each run
  (mutating the configured ones), but never removes a copy: a module deleted or renamed since an earlier run
  stays importable there, so a test could pass against code that no longer exists. Each such copy is
  removed (mutmut's own ``.meta`` and ``.spans`` files, its results and the line index ``mutmut show``
  reads, have no source and are kept).
- **The map of tests to functions.** mutmut records which tests reach each function once, and afterwards
  maps only tests it has not seen: a test edited since (to reach a function it did not) is never remapped,
  so the mutants it would kill are not run against it and stay "survived" (2026-11-28: 31 false survivors
  in ``leanlm.claims.results``). When a selected test file or a helper under ``tests/`` (conftest, a module
  tests import) is newer than mutmut's stats, the map is dropped (mutmut maps every test again, a minute for
  a selection) and every result but "killed" is cleared, so that those mutants run again. Kills are kept: a test failed on each (one weakened or deleted
  since would leave a kill stale, which only a run from an empty folder rules out).

Usage: python scripts/mutation_refresh.py <work folder>   (the folder holding ``src`` and ``mutants``)
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

KILLED = 1  # mutmut's exit code of a mutant the tests failed on


# mutmut's own files beside a module's copy: its results (.meta) and the line index `mutmut show` reads (.spans)
MUTMUT_FILES = (".meta", ".spans")


def stale_copies(work: Path) -> list[Path]:
    """The files under ``work/mutants/src`` without a source under ``work/src`` (mutmut's own files apart)."""
    copies = work / "mutants" / "src"
    if not copies.is_dir():
        return []
    return sorted(p for p in copies.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in MUTMUT_FILES and not (work / "src" / p.relative_to(copies)).is_file())


def _selected(work: Path) -> list[Path]:
    """The test files and folders mutmut runs (``pytest_add_cli_args_test_selection`` of the work folder's
    pyproject.toml; everything under tests/ where it names none)."""
    config = work / "pyproject.toml"
    chosen = tomllib.loads(config.read_text(encoding="utf-8")).get("tool", {}).get("mutmut", {}).get(
        "pytest_add_cli_args_test_selection", []) if config.is_file() else []
    return [work / c.split("::")[0] for c in chosen] or [work / "tests"]


def tests_edited_since_mapped(work: Path) -> list[Path]:
    """The test files mutmut runs, and every other module under ``work/tests`` (helpers, conftest: what they
    import), newer than mutmut's stats (``mutants/mutmut-stats.json``, written at each run): edited since
    mutmut last mapped tests to functions. A test module outside the selection never runs there."""
    stats = work / "mutants" / "mutmut-stats.json"
    if not stats.is_file():
        return []
    mapped = stats.stat().st_mtime_ns
    selected = _selected(work)
    return sorted(p for p in (work / "tests").rglob("*.py") if "__pycache__" not in p.parts
                  and p.stat().st_mtime_ns > mapped
                  and (not p.name.startswith("test_") or any(p == s or s in p.parents for s in selected)))


def drop_test_map(work: Path) -> int:
    """Make mutmut map every test again and rerun every mutant not killed; returns how many results were cleared."""
    stats_file = work / "mutants" / "mutmut-stats.json"
    stats = json.loads(stats_file.read_text(encoding="utf-8"))
    stats["tests_by_mangled_function_name"], stats["duration_by_test"] = {}, {}
    cleared = 0
    for meta_file in sorted((work / "mutants" / "src").rglob("*.meta")):
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        codes = meta.get("exit_code_by_key", {})
        stale = [key for key, code in codes.items() if code is not None and code != KILLED]
        for key in stale:
            codes[key] = None
        if stale:
            cleared += len(stale)
            meta_file.write_text(json.dumps(meta, indent=4), encoding="utf-8")
    stats_file.write_text(json.dumps(stats), encoding="utf-8")  # last: its time marks the map as current
    return cleared


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    stale = stale_copies(work)
    for copy in stale:
        copy.unlink()
    if stale:
        print(f"mutation_refresh: {len(stale)} copies of deleted modules removed from {work / 'mutants' / 'src'}")
    edited = tests_edited_since_mapped(work)
    if edited:
        cleared = drop_test_map(work)
        print(f"mutation_refresh: {len(edited)} test file(s) edited since mutmut mapped the tests "
              f"({', '.join(p.name for p in edited[:5])}{', ...' if len(edited) > 5 else ''}): the map is "
              f"dropped and {cleared} results other than killed are cleared, to run again")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
