"""``leanlm gpu-check``: the sections in priority order, each under its share of the time budget.

The check runs on the device in two calls (``protocol.DEVICE_CALLS``), each inside the device's
ten-minute command limit and together inside a session's fifteen minutes of device time with the machine's start:
sections 1-4, then the pipeline. Each section's share is its time in that protocol (``protocol.py``,
from the times the first GPU check measured), and a call's default budget is the sum over its sections.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from leanlm.benchmarks.gpucheck.correctness import section_correctness
from leanlm.benchmarks.gpucheck.environment import section_environment
from leanlm.benchmarks.gpucheck.pipeline import section_pipeline
from leanlm.benchmarks.gpucheck.protocol import SECTION_SECONDS, section_seconds
from leanlm.benchmarks.gpucheck.record import CheckRecord, error_record
from leanlm.benchmarks.gpucheck.throughput import section_bert, section_decoder

# --tiny without --budget-s: the tiny run (CI's) checks that every sub-step works, so no sub-step may be
# skipped for time on a loaded machine (under CI's load the reference step alone took 2 minutes).
TINY_BUDGET_S = 3600.0

# (name, title, seconds, runner), in priority order; the seconds are the protocol's (protocol.py).
SECTIONS: tuple[tuple[str, str, float, Callable], ...] = (
    ("environment", "1. environment, bf16 matmul rate, SDPA kernel of each attention variant",
     SECTION_SECONDS["environment"], section_environment),
    ("bert", "2. BERT-base MLM at 128 x 512, bf16, eager then compiled: MHA and MHE-MUL", SECTION_SECONDS["bert"],
     section_bert),
    ("decoder", "3. ch. 4's 500M decoder at its paper micro-batch, every mixer; the largest model after a warm "
                "step", SECTION_SECONDS["decoder"], section_decoder),
    ("correctness", "4. leanlm vs its transformers twin (BERT, Qwen2), and the CPU fp32 reference",
     SECTION_SECONDS["correctness"], section_correctness),
    ("pipeline", "5. leanlm pretrain and finetune, one run per chapter, on the bundle's data",
     SECTION_SECONDS["pipeline"], section_pipeline),
)
SECTION_NAMES = tuple(name for name, *_ in SECTIONS)
assert SECTION_NAMES == tuple(SECTION_SECONDS), "protocol.py and SECTIONS name the same sections in one order"


def budget_for(tiny: bool, given: float | None, sections: tuple[str, ...] = SECTION_NAMES) -> float:
    """The check's budget: ``--budget-s`` where given, else the tiny mode's, else the sections' seconds."""
    if given is not None:
        return float(given)
    return TINY_BUDGET_S if tiny else section_seconds(sections)


@dataclass
class Context:
    """What the sections share: where they run, the bundle (read once), the scratch project."""

    device: Any
    tiny: bool
    out_dir: Path
    bundle_dir: Path | None
    echo: Callable[[str], None] = print
    bundle: Any = None
    bundle_error: str | None = None
    reference: Any = None
    scratch: Path | None = None
    temporary: list[Path] = field(default_factory=list)

    def require_bundle(self):
        """The bundle: ``--bundle``'s, or with ``--tiny`` and none given one made here first (data stages and
        a fresh CPU fp32 reference). A failure is remembered, so the next section fails at once with it."""
        from leanlm.benchmarks.gpucheck.bundle import Bundle, build_bundle

        if self.bundle is not None:
            return self.bundle
        if self.bundle_error:
            raise RuntimeError(self.bundle_error)
        try:
            if self.bundle_dir is not None:
                self.bundle = Bundle.open(self.bundle_dir)
            elif self.tiny:
                import tempfile

                where = Path(tempfile.mkdtemp(prefix="leanlm-gpucheck-bundle-"))
                self.temporary.append(where)
                self.echo("gpu-check: making a tiny bundle (data stages, CPU fp32 reference) first")
                build_bundle(where / "bundle", tiny=True, wheels=False, echo=self.echo)
                self.bundle = Bundle.open(where / "bundle", fresh=True)
            else:
                raise FileNotFoundError("no --bundle given: sections 4 and 5 read the bundle `make gpu-bundle` "
                                        "makes (or run with --tiny, which makes a tiny one)")
        except Exception as exc:
            self.bundle_error = f"the bundle is unusable: {type(exc).__name__}: {exc}"
            raise
        return self.bundle

    def close(self) -> None:
        for path in [*self.temporary, *([self.scratch] if self.scratch else [])]:
            shutil.rmtree(path, ignore_errors=True)


def parse_sections(text: str | None) -> tuple[str, ...]:
    """``--sections``: names or numbers (1-5), comma-separated; all by default."""
    if not text:
        return SECTION_NAMES
    chosen = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        if item.isdigit() and 1 <= int(item) <= len(SECTIONS):
            item = SECTION_NAMES[int(item) - 1]
        if item not in SECTION_NAMES:
            raise ValueError(f"--sections: {item!r} is not a section; use 1-{len(SECTIONS)} or {', '.join(SECTION_NAMES)}")
        chosen.append(item)
    return tuple(name for name in SECTION_NAMES if name in chosen)


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The table printed last (the device reply carries the end of the output)."""
    lines = [f"{'section/step':<58} {'status':<8} {'s':>7}  figures"]
    for section, body in doc["sections"].items():
        for step, entry in body["steps"].items():
            figures = []
            if entry.get("loop_ms") is not None:
                figures.append(f"{entry['loop_ms']:.1f} ms/step, {entry['tokens_per_s']:,.0f} tok/s")
                if entry.get("mfu") is not None:
                    figures.append(f"MFU {100 * entry['mfu']:.1f}%")
                if entry.get("peak_memory_bytes"):
                    figures.append(f"peak {entry['peak_memory_bytes'] / 2**30:.2f} GiB")
            if "passed" in entry:
                figures.append(f"passed={entry['passed']} (ref {entry['vs_reference']['max_rel_diff']:.2e}, "
                               f"curve {entry['curve']['max_rel_diff']:.2e})")
            if "tflops" in entry:
                figures.append(f"{entry['tflops']:.1f} TFLOP/s bf16")
            if "by_kernel" in entry:
                figures.append(", ".join(f"{k}: {len(v)}" for k, v in entry["by_kernel"].items()))
            seconds = f"{entry['seconds']:.1f}" if "seconds" in entry else "-"
            lines.append(f"{section + '/' + step:<58.58} {entry['status']:<8} {seconds:>7}  {'; '.join(figures)}")
    return lines


def run_check(out_dir: Path, device: str, tiny: bool, budget_s: float, sections: tuple[str, ...],
              bundle_dir: Path | None, argv: list[str], echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the chosen sections; returns the record (also in ``out_dir/gpu_check.json``)."""
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SECTIONS if s[0] in sections]
    total = section_seconds(sections)
    shares = {name: seconds / total for name, _, seconds, _ in chosen}
    head = {"command": argv, "device_requested": device, "tiny": tiny, "sections_requested": list(sections),
            "bundle": str(bundle_dir) if bundle_dir else None, "python": sys.version.split()[0],
            "torch": torch.__version__}
    record = CheckRecord(out_dir, head, budget_s, shares, echo=echo)
    ctx = Context(torch.device(device), tiny, out_dir, bundle_dir, echo)
    try:
        for name, title, _, runner in chosen:
            section = record.section(name, title)
            try:
                runner(section, ctx)
            except Exception as exc:  # noqa: BLE001 - a section's own bookkeeping failing ends that section only
                section.note("section_error", error_record(exc))
                echo(f"gpu-check {name}: the section stopped: {type(exc).__name__}: {exc}")
    finally:
        ctx.close()
        record.finish()
    for line in summary_lines(record.doc):
        echo(line)
    echo(f"gpu-check: {record.path} ({record.elapsed():.0f} s of a {budget_s:.0f} s budget)")
    return record.doc
