"""paper_tables/<profile>/report.html: one run's results as a page a reader opens from disk (``leanlm
report-page``, the pipeline's last rule, workflow/rules/report_page.smk).

One self-contained file (figures embedded as data: URIs, no script, no remote resource): a front page (the
profile, the commit, the machine, the time the jobs took, what the scale can test, the claims' verdicts),
every claim with its parts' effects and 95% intervals drawn against the effects the claim allows
(leanlm.reporting.report_svg) and the thesis's numbers, then every table and figure in the thesis's order
(leanlm.reporting.report_outputs). The HTML comes from workflow/templates/report.html.j2 with autoescaping
on: every value from a CSV or a caption is text, never markup. See docs/report.md.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import write_text
from leanlm.reporting.report_outputs import chapters, href, outputs_in
from leanlm.reporting.report_svg import interval_svg
from leanlm.reporting.tables_pdf import VERDICT_ORDER, claims_summary, scale_summary

log = logging.getLogger(__name__)

TEMPLATE = "report.html.j2"
REPORT = "report.html"
# claims.csv's columns this page reads (leanlm.claims.report writes them); others are ignored
CLAIM_COLUMNS = ("claim", "chapter", "where", "claim_verdict", "part", "comparison", "family", "effect", "a", "b",
                 "estimate", "low", "high", "region_low", "region_high", "basis", "verdict", "reason",
                 "thesis_a", "thesis_b")


def commit() -> str:
    """The project's git commit (short hash, "+ changes" where the tree differs from it), or "unknown"
    outside a git checkout."""
    root = paths.project_root()
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + (" + changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def run_time(profile: str) -> dict:
    """What the pipeline records of how long the run took: the jobs' benchmarks (benchmarks/<profile>/,
    the heavy rules' Snakemake ``benchmark:`` files, leanlm.run_summary) and, where a reference run keeps
    one beside its tables (docs/results/<name>/RUN.json), that run's own wall time."""
    from leanlm.run_summary import per_rule, read_benchmarks

    root = paths.project_root()
    out: dict = {"wall_seconds": None, "benchmarks": None}
    record = paths.tables_dir(profile) / "RUN.json"
    if record.is_file():
        run = json.loads(record.read_text(encoding="utf-8"))
        out["wall_seconds"] = run.get("wall_seconds")
        out["command"], out["start"], out["end"] = run.get("command"), run.get("start"), run.get("end")
    jobs = read_benchmarks(root / "benchmarks" / profile, root / "logs" / profile)
    if not jobs.empty:
        rules = per_rule(jobs)
        out["benchmarks"] = {"jobs": len(jobs), "wall_s": float(jobs["wall_s"].sum()),
                             "cpu_s": float(jobs["cpu_s"].sum(skipna=True)),
                             "rules": [{"rule": r.rule, "jobs": int(r.jobs), "wall_s": float(r.wall_s),
                                        "longest_s": float(r.longest_s)} for r in rules.itertuples()]}
    summary = root / "benchmarks" / profile / "summary.md"
    out["summary"] = summary if summary.is_file() else None
    return out


def duration(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    seconds = round(float(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _quotes() -> dict[str, str]:
    """Each claim's sentence from params/claims.yaml, where that file can be read (it is the claims stage's
    input; a report of a copied folder goes without)."""
    from leanlm.claims.spec import load_claims
    from leanlm.errors import LeanLMError

    try:
        return {claim.id: claim.quote for claim in load_claims()}
    except (LeanLMError, OSError) as exc:
        log.warning("claims' sentences left out: %s", exc)
        return {}


def claims(path: Path) -> list[dict]:
    """claims.csv (leanlm.claims.report) as claims with their parts, in the file's order. Columns are read
    by name; others (e.g. ``preconditions``) are shown where present. Each claim's ``verdict_text`` is the
    verdict as claims.md/csv/tex say it ("supported, one pretraining run": :func:`verdict_text`), from
    ``claim_pretraining_runs`` where the file has it."""
    from leanlm.claims.report import verdict_text

    frame = pd.read_csv(path)
    missing = [c for c in CLAIM_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(f"{path} has no column {', '.join(missing)}: rewrite it with `leanlm claims`")
    quotes = _quotes()
    out: dict[str, dict] = {}
    for row in frame.to_dict("records"):
        claim = out.setdefault(row["claim"], {"id": row["claim"], "chapter": row["chapter"], "where": row["where"],
                                              "verdict": row["claim_verdict"], "quote": quotes.get(row["claim"]),
                                              "verdict_text": verdict_text(row["claim_verdict"],
                                                                           row.get("claim_pretraining_runs")),
                                              "parts": []})
        estimate, low, high = (_number(row[k]) for k in ("estimate", "low", "high"))
        region = tuple(float(row[k]) for k in ("region_low", "region_high"))
        drawn = None not in (estimate, low, high)
        claim["parts"].append({
            "part": row["part"], "comparison": row["comparison"], "effect": row["effect"],
            "a": _number(row["a"]), "b": _number(row["b"]), "estimate": estimate, "low": low, "high": high,
            "region": region, "basis": row["basis"] if isinstance(row["basis"], str) else "",
            "verdict": row["verdict"], "reason": row["reason"] if isinstance(row["reason"], str) else "",
            "preconditions": row["preconditions"] if isinstance(row.get("preconditions"), str) else "",
            "thesis_a": _number(row["thesis_a"]), "thesis_b": _number(row["thesis_b"]),
            "svg": interval_svg(estimate, low, high, region, row["effect"]) if drawn else None})
    return list(out.values())


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    value = float(value)
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:.{digits}g}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=_num, duration=duration)
    return env


def page(config: dict, parts: list[str] | None = None) -> str:
    """The HTML of report.html for the profile ``config`` (load_config's), from the outputs in its
    paper_tables folder: ``parts`` (the pipeline's run) or every one there."""
    from leanlm.provenance import hardware
    from leanlm.reporting.tables_pdf import _renderers

    profile = config["profile"]
    folder = paths.tables_dir(profile)
    claims_csv = folder / "claims.csv"
    tables, figures = outputs_in(folder, parts)
    time = run_time(profile)
    linked = [(label, folder / name) for label, name in
              (("tables.pdf", "tables.pdf"), ("claims.md", "claims.md"), ("claims.csv", "claims.csv"))]
    if time["summary"]:
        linked.append(("benchmarks", time["summary"]))
    return _environment().get_template(TEMPLATE).render(
        profile=profile, commit=commit(), machine=hardware(), time=time,
        built=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        scale=scale_summary(config), summary=claims_summary(claims_csv), verdict_order=VERDICT_ORDER,
        claims=claims(claims_csv) if claims_csv.is_file() else [],
        chapters=chapters(profile, tables, figures, _renderers()),
        files=[{"label": label, "href": href(path, folder)} for label, path in linked if path.is_file()])


def build_report(config: dict, parts: list[str] | None = None) -> Path:
    """Write paper_tables/<profile>/report.html (atomically) and return its path."""
    folder = paths.tables_dir(config["profile"])
    folder.mkdir(parents=True, exist_ok=True)
    out = write_text(folder / REPORT, page(config, parts))
    log.info("wrote %s", out)
    return out


def where_lines(profile: str) -> list[str]:
    """The end of a run (the Snakefile's onsuccess): where the report, the PDF and the tables are, each
    named only where it exists, as paths from the project root."""
    folder = paths.tables_dir(profile)
    named = [(folder / REPORT, "the report: open it in a browser (docs/report.md)"),
             (folder / "tables.pdf", "every table and figure in the thesis's order"),
             (folder, "the tables (.tex, .csv), figures (.pdf, .png) and claims (.md, .csv)")]
    root = paths.project_root()
    return [f"leanlm: {path.relative_to(root)}{'/' if path.is_dir() else ''}  {what}"
            for path, what in named if path.exists()]


# Snakemake's own report (`snakemake --report`): workflow/rules/report.smk marks the tables and figures
# with report(), whose category and labels come from here.
def report_category(name: str) -> str:
    """An output's chapter, the category Snakemake's report files it under."""
    from leanlm.reporting.tables_pdf import _renderers
    from leanlm.reporting.thesis_order import CHAPTER_TITLES, chapter_of

    number = chapter_of(name, _renderers())
    return (f"Chapter {number}: {CHAPTER_TITLES[number]}" if number in CHAPTER_TITLES
            else f"Chapter {number}" if number else "Other outputs")


def report_labels(profile: str, name: str, kind: str) -> dict[str, str]:
    """An output's labels in Snakemake's report: ``output``, its number as the thesis numbers it, and
    ``what``, its caption (Snakemake's caption files are one per rule, so the caption travels as a label)."""
    from leanlm.reporting.report_outputs import caption_of
    from leanlm.reporting.thesis_order import THESIS_ORDER

    number = (f"{kind.capitalize()} {name.split('_', 1)[1].replace('_', '.')}" if name in THESIS_ORDER
              else f"{name} (not in the thesis)")
    return {"output": number, "what": caption_of(profile, name) or name}
