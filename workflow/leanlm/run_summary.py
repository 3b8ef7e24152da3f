"""What a Snakemake run reports besides its outputs: a table of the jobs' benchmarks, and the end of the
log of every job that failed.

Every rule writes its job's whole output to ``logs/<profile>/<rule>/<wildcards>.log``, and the heavy rules
(data, pretraining, fine-tuning) time themselves with Snakemake's ``benchmark:`` into
``benchmarks/<profile>/<rule>/<wildcards>.tsv``: the same relative path, so a benchmark's log is known.
At the end of a run the Snakefile calls :func:`write_summary` (``benchmarks/<profile>/summary.md`` and
``.csv``: per rule, the jobs, their wall-clock and CPU time and peak memory; and the slowest jobs) and,
after a failure, prints :func:`failure_report` (the last lines of each failed job's log and its path).

Snakemake measures a job's own process tree. A ``leanlm`` command forked from the warm leanlm
(:mod:`leanlm.forkserver`) runs outside that tree, which holds only its thin client; each such command
writes its own CPU time and peak memory into the log (one line; a data job's ``dvc repro`` runs several).
Here a job's CPU time is Snakemake's figure plus those of its forked commands, and its peak memory is
Snakemake's plus the largest forked command's (the client and its forked command run side by side;
a job's forked commands run one after another). Column ``forked``: how many forked commands reported.
Wall-clock time is Snakemake's: the client waits for its command. Snakemake samples a process tree every
half second for its first 30 samples and every 30 s after, so a tree's CPU time and memory are samples
(a job's last seconds may fall between two); a forked command's are exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from leanlm import forkserver
from leanlm.errors import DataError
from leanlm.io import atomic_path, write_text

# Columns of a Snakemake benchmark file this summary reads (s: wall-clock seconds, max_rss: MiB,
# cpu_time: user + system seconds). Snakemake writes NA where it took no sample.
BENCHMARK_COLUMNS = ("s", "max_rss", "cpu_time")
SLOWEST = 10  # jobs listed in summary.md
TAIL_LINES = 30  # lines of a failed job's log shown on the terminal
_TAIL_BYTES = 64 * 1024  # enough for TAIL_LINES lines of any sane log; logs may be gigabytes


def tail(path: str | Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a text file, reading only its end."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - _TAIL_BYTES))
        data = fh.read()
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def failure_report(failed: list[tuple[str, list[str]]], lines: int = TAIL_LINES) -> str:
    """One block per failed job (its description, e.g. ``rule pretrain (run_id=...)``, and its log
    files): the log's path and its last ``lines`` lines."""
    blocks = []
    for job, logs in failed:
        if not logs:
            blocks.append(f"leanlm: {job} failed and has no log; see Snakemake's error message above")
        for log in logs:
            if not Path(log).is_file():
                blocks.append(f"leanlm: {job} failed before writing its log {log}")
                continue
            shown = tail(log, lines)
            body = "\n".join(f"  | {line}" for line in shown) if shown else "  | (the log is empty)"
            blocks.append(f"leanlm: {job} failed; last {len(shown)} lines of its log {log}:\n{body}")
    return "\n".join(blocks)


def log_of(benchmark: Path, benchmarks_dir: Path, logs_dir: Path) -> Path:
    """The log that a benchmark file's job wrote (the same path under ``logs_dir``, ending ``.log``)."""
    return (logs_dir / benchmark.relative_to(benchmarks_dir)).with_suffix(".log")


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def forked_usage(log: Path) -> list[dict[str, float]]:
    """The usage lines (:func:`leanlm.forkserver.usage_line`) of the commands a job forked, from its log."""
    with open(log, encoding="utf-8", errors="replace") as fh:
        return [usage for line in fh if line.startswith(forkserver.USAGE_PREFIX)
                if (usage := forkserver.parse_usage(line)) is not None]


def _plus(measured: float, added: float) -> float:
    return added if math.isnan(measured) else measured + added


def read_benchmarks(benchmarks_dir: str | Path, logs_dir: str | Path) -> pd.DataFrame:
    """One row per benchmark file under ``benchmarks_dir``: rule, job (its wildcards' path), wall_s,
    cpu_s, max_rss_mib and forked (see module doc). A file with several rows (Snakemake's ``repeat()``)
    gives their mean time and their peak memory."""
    benchmarks_dir, logs_dir = Path(benchmarks_dir), Path(logs_dir)
    rows = []
    for path in sorted(benchmarks_dir.rglob("*.tsv")):
        table = pd.read_csv(path, sep="\t", na_values=["NA", "-"])
        missing = [c for c in BENCHMARK_COLUMNS if c not in table.columns]
        if missing or table.empty:
            raise DataError(f"{path} is not a Snakemake benchmark file (no rows, or no column {', '.join(missing)})")
        relative = path.relative_to(benchmarks_dir).with_suffix("")
        rule, job = (relative.parts[0], "/".join(relative.parts[1:])) if len(relative.parts) > 1 else (relative.name, "")
        cpu, rss = _number(table["cpu_time"].mean()), _number(table["max_rss"].max())
        log = log_of(path, benchmarks_dir, logs_dir)
        forked = forked_usage(log) if log.is_file() else []
        if forked:
            cpu = _plus(cpu, sum(u["cpu_time"] for u in forked))
            rss = _plus(rss, max(u["max_rss"] for u in forked))
        rows.append({"rule": rule, "job": job, "wall_s": _number(table["s"].mean()), "cpu_s": cpu,
                     "max_rss_mib": rss, "forked": len(forked)})
    return pd.DataFrame(rows, columns=["rule", "job", "wall_s", "cpu_s", "max_rss_mib", "forked"])


def per_rule(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per rule: jobs, total and longest wall-clock time, total CPU time, peak memory; most CPU first."""
    table = jobs.groupby("rule").agg(jobs=("job", "size"), wall_s=("wall_s", "sum"), longest_s=("wall_s", "max"),
                                     cpu_s=("cpu_s", "sum"), max_rss_mib=("max_rss_mib", "max"))
    return table.sort_values(["cpu_s", "wall_s"], ascending=False).reset_index()


def _markdown(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        if isinstance(value, float):
            return "NA" if math.isnan(value) else f"{value:,.1f}"
        return str(value)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def write_summary(benchmarks_dir: str | Path, logs_dir: str | Path, slowest: int = SLOWEST) -> Path | None:
    """Write ``summary.csv`` (per rule) and ``summary.md`` (per rule, then the slowest jobs) into
    ``benchmarks_dir``; the path of summary.md, or None when there are no benchmarks yet."""
    benchmarks_dir = Path(benchmarks_dir)
    jobs = read_benchmarks(benchmarks_dir, logs_dir)
    if jobs.empty:
        return None
    rules = per_rule(jobs)
    with atomic_path(benchmarks_dir / "summary.csv") as tmp:
        rules.to_csv(tmp, index=False, float_format="%.2f")
    top = jobs.sort_values("wall_s", ascending=False).head(slowest)
    text = "\n\n".join([
        f"# Benchmarks of `{benchmarks_dir}`",
        "The latest benchmark of every benchmarked job (Snakemake `benchmark:` files), whether this run or an "
        "earlier one ran it. Times in seconds, memory in MiB. CPU time and memory add what the `leanlm` "
        "commands forked from the warm leanlm reported (`forked`: how many; see `leanlm/run_summary.py`).",
        "## Per rule (most CPU time first)",
        _markdown(rules),
        f"## The {len(top)} slowest jobs",
        _markdown(top),
    ]) + "\n"
    return write_text(benchmarks_dir / "summary.md", text)
