"""Copy a finished run's claims report and figures into docs/results/<name>/ with how it was made.

    python scripts/collect_results.py --profile signal --dest docs/results/signal-cpu \
        --command "snakemake --cores 2 --configfile params/signal.yaml --config subset=cpu" \
        --commit 8188237 --wall-seconds 4321 --load-log /path/to/load.log

What it copies (from paper_tables/<profile>/ and benchmarks/<profile>/): claims.{md,csv,tex}, tables.pdf, every
figure_*.{png,pdf,csv} and table_*.csv the run rendered, and the benchmarks' summary.md. It writes RUN.json
(command, commit, machine, wall time, start/end, the machine's load while it ran when a log of
`/proc/loadavg` samples is given, and any `--note`) so a reader can tell exactly what produced the numbers. Nothing here
computes a result: it only moves what the pipeline wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _machine() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_gib = None
    if Path("/proc/meminfo").exists():
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem_gib = round(kib / 2**20, 1)
    import torch

    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": mem_gib, "gpu": None,
            "python": platform.python_version(), "torch": torch.__version__, "os": platform.platform()}


def _load(log: Path | None) -> dict | None:
    """Mean and max of the 1-minute load average over the samples (`HH:MM l1 l5 l15` per line)."""
    if not log or not log.is_file():
        return None
    ones = [float(line.split()[1]) for line in log.read_text().splitlines() if len(line.split()) >= 2]
    return {"samples": len(ones), "mean_1min": round(sum(ones) / len(ones), 2), "max_1min": max(ones)} if ones else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--source", type=Path, default=ROOT, help="the project root the run wrote into")
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--wall-seconds", type=int, required=True)
    parser.add_argument("--start", default="")
    parser.add_argument("--end", default="")
    parser.add_argument("--load-log", type=Path, default=None)
    parser.add_argument("--note", action="append", default=[],
                        help="a fact about how the run was made that the reader needs (repeatable), kept in RUN.json")
    args = parser.parse_args(argv)

    tables = args.source / "paper_tables" / args.profile
    claims = [tables / f"claims.{ext}" for ext in ("md", "csv", "tex")]
    missing = [str(p) for p in claims if not p.is_file()]
    if missing:
        print(f"collect_results: the run has no claims report: {', '.join(missing)}", file=sys.stderr)
        return 2
    args.dest.mkdir(parents=True, exist_ok=True)
    copied = []
    pdf = [tables / "tables.pdf"] if (tables / "tables.pdf").is_file() else []
    for path in claims + pdf + sorted(tables.glob("figure_*")) + sorted(tables.glob("table_*.csv")):
        shutil.copy2(path, args.dest / path.name)
        copied.append(path.name)
    summary = args.source / "benchmarks" / args.profile / "summary.md"
    if summary.is_file():
        shutil.copy2(summary, args.dest / "benchmarks_summary.md")
        copied.append("benchmarks_summary.md")
    run = {"profile": args.profile, "command": args.command, "commit": args.commit,
           "wall_seconds": args.wall_seconds, "start": args.start, "end": args.end,
           "machine": _machine(), "load_while_running": _load(args.load_log), "notes": args.note, "files": copied}
    tmp = args.dest / "RUN.json.tmp"
    tmp.write_text(json.dumps(run, indent=2) + "\n")
    tmp.replace(args.dest / "RUN.json")
    print(f"{len(copied)} files and RUN.json in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
