"""The README is a guide and the docs say true things about the tree (issue 26, item 6).

- README.md has at most 250 lines: reference lives in docs/, history in CHANGELOG.md.
- Every backticked token in README.md and docs/*.md that looks like a path inside the repository names a
  file or folder that exists, written from the repository root (`workflow/leanlm/cluster.py`, not
  `leanlm/cluster.py`). Outputs of a run (`data/`, `models/`, `paper_tables/` ...) are not in a clone, so
  their tokens are left out, as are patterns (`<profile>`, `*`, `{a,b}`) and commands (a space).
- Every relative Markdown link in those files leads to a file that exists, and its `#anchor`, if any, to a
  heading of that file.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Folders a run (or a tool) creates: a token under one of them names an output, not a committed file.
OUTPUTS = ("data/", "models/", "results/", "paper_tables/", "logs/", "benchmarks/", ".snakemake/", ".venv/",
           "build/", "out/", ".gpu-bundle/", "mutants/", ".dvc/cache/")
# The first folders of the repository's tree: a token starting with one of them (or naming a committed
# top-level file) is meant as a path from the root. Package-relative tokens (`leanlm/x.py`, `training/x.py`)
# start with none of them and are caught by LOOKS_LIKE_CODE below.
TOP = sorted(p.name for p in ROOT.iterdir() if not p.name.startswith(".git"))
LOOKS_LIKE_CODE = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a fenced block's lines are commands and output, not paths)."""
    return "".join(part for i, part in enumerate(re.split(r"^```.*$", text, flags=re.M)) if i % 2 == 0)


def _is_repo_path(token: str) -> bool:
    if " " in token or not LOOKS_LIKE_CODE.match(token) or token.startswith(("/", "~", "../")):
        return False
    if token.startswith(OUTPUTS) or "/" not in token.rstrip("/"):
        return False
    head = token.split("/", 1)[0]
    # `leanlm/...` is the package seen from workflow/; `training/...`, `reporting/...` and the like are
    # its sub-packages: both must be written from the root.
    package = ROOT / "workflow" / "leanlm"
    return head in TOP or head == "leanlm" or (package / head).exists()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(path.read_text(encoding="utf-8")).splitlines()
            if line.startswith("#")}


def test_the_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference to docs/, history to "
        "CHANGELOG.md")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists_from_the_repository_root(doc):
    missing = sorted({token for token in CODE_SPAN.findall(_prose(doc.read_text(encoding="utf-8")))
                      if _is_repo_path(token) and not (ROOT / token).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist from the repository root: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(doc):
    broken = []
    for target in LINK.findall(_prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files or headings: {broken}"


def test_the_readme_links_the_license_the_citation_and_the_changelog():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md"):
        assert f"]({name})" in readme and (ROOT / name).is_file(), name


def _one_part_commands() -> list[list[str]]:
    """The README's "One table, one chapter, one model" block: its command lines (continuations joined,
    comments dropped), split as bash would."""
    return [shlex.split(line) for line in _one_part_lines() if line.startswith("snakemake ")]


def _one_part_lines() -> list[str]:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## One table, one chapter, one model", 1)[1]
    section = section.split("\n## ", 1)[0]
    lines = []
    for block in section.split("```bash")[1:]:
        block = block.split("```", 1)[0].replace("\\\n", " ")
        lines += [line.split("  #", 1)[0].strip() for line in block.strip().splitlines()]
    return lines


def test_the_readmes_make_targets_are_the_tested_ones_of_docs_running():
    """The README's `make table / chapter / model` lines are docs/running.md's, which tests/test_table_jobs.py
    runs (dry) verbatim."""
    made = [line for line in _one_part_lines() if line.startswith("make ")]
    assert len(made) == 3, made
    running = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    for line in made:
        assert line in running, line


def test_the_readmes_targets_come_before_the_configfile():
    """--configfile takes every file name after it as another config file: the targets must precede it."""
    commands = _one_part_commands()
    assert len(commands) == 3, commands
    for argv in commands:
        at = argv.index("--configfile")
        assert argv[at + 2:] == [], f"README: nothing may follow --configfile's file: {argv}"
        assert [a for a in argv[1:at] if "/" in a], f"README: the command names no target: {argv}"


@pytest.mark.slow
def test_the_readmes_one_table_one_chapter_one_model_commands_plan_their_targets(scratch_root):
    """Each command of that block, run verbatim as a dry run, plans what its comment says: the named tables'
    renderings, one model's pretraining (and nothing else it does not need), one fine-tuning."""
    from test_faults import snakemake, workflow_project

    root = workflow_project(scratch_root)
    for argv in _one_part_commands():
        proc = snakemake(root, *argv[1:], "-n")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{shlex.join(argv)} -n failed:\n{out[-3000:]}"
        stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:", 1)[1].split("Reasons", 1)[0], re.M))
        targets = [a for a in argv[1:argv.index("--configfile")] if "/" in a]
        if targets[0].startswith("paper_tables/"):
            assert int(stats["render_table"]) == len(targets), (argv, stats)
        elif targets[0].startswith("models/"):
            assert {k: int(v) for k, v in stats.items()} == {"data": 1, "pretrain": 1, "total": 2}, (argv, stats)
        else:
            assert int(stats["finetune"]) == 1 and "render_table" not in stats, (argv, stats)
