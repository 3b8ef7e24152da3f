"""Per-module mutation scores of the last mutmut run (scripts/mutate.sh calls it in build/mutate/).

Reads ``mutmut results --all true`` (one ``<module>.<mangled function>__mutmut_<n>: <status>`` line per
mutant) and prints a Markdown table: per module, mutants killed, timed out (counted as killed, as mutmut
does, but shown apart: on a busy machine a slow test can time out without a mutant's help), survived,
not run, and the score (killed + timed out) / (killed + timed out + survived). Optional arguments
are the mutant-name globs the run was narrowed to; only matching mutants are counted.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from collections import Counter, defaultdict

KILLED = {"killed", "caught by type check", "segfault"}


def module_of(mutant: str) -> str:
    """``leanlm.training.schedules.x_linear__mutmut_3`` -> ``leanlm.training.schedules``."""
    parts = mutant.split(".")
    for i, part in enumerate(parts):
        if part.startswith(("x_", "xǁ")):
            return ".".join(parts[:i])
    return mutant.rsplit(".", 1)[0]


def main(globs: list[str]) -> int:
    done = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], capture_output=True,
                          text=True, check=True)
    counts: dict[str, Counter] = defaultdict(Counter)
    for line in done.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or (globs and not any(fnmatch.fnmatchcase(name, g) for g in globs)):
            continue
        kind = ("killed" if status in KILLED else "timeout" if status == "timeout"
                else "survived" if status == "survived" else "not run")
        counts[module_of(name)][kind] += 1
    print("| module | mutants | killed | timeout | survived | not run | score |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for module in sorted(counts):
        c = counts[module]
        judged = c["killed"] + c["timeout"] + c["survived"]
        score = f"{100 * (c['killed'] + c['timeout']) / judged:.1f}%" if judged else "n/a"
        print(f"| {module} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | "
              f"{c['not run']} | {score} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
