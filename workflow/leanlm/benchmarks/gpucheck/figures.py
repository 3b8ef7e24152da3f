"""Section 4's loss curves drawn from a ``gpu_check.json``: leanlm beside its ``transformers`` twin.

The device has no plotting library to spare and its minutes are scarce, so the check records the
curves and this module draws them afterwards, on any machine, from the committed record::

    python -m leanlm.benchmarks.gpucheck.figures docs/results/gpu/2026-11-28-h200/call-1/gpu_check.json \\
        docs/results/gpu/2026-11-28-h200/twin_curves

writes ``twin_curves.png`` and ``twin_curves.pdf``. One column per twin (BERT, Qwen2): on top the two
per-step loss curves and the CPU fp32 reference's first losses; below, leanlm's relative difference
from the twin at every step, the quantity the check's ``curve`` tolerance bounds once averaged over
tenths of the run (the per-step figure is noisier than the tolerance, which is on the means).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TWIN_TITLES = {"bert": "BERT (MLM) vs BertForMaskedLM", "qwen": "Qwen decoder (causal LM) vs Qwen2ForCausalLM"}


def twin_curves(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The twins section 4 ran in ``record``, each with its curves and verdict; a twin that did not run
    (skipped, failed) is left out, and none at all is an error naming the record's statuses."""
    steps = record.get("sections", {}).get("correctness", {}).get("steps", {})
    curves = {name.split("/", 1)[1]: step for name, step in sorted(steps.items())
              if name.startswith("twin/") and step.get("status") == "ok"}
    if not curves:
        statuses = {name: step.get("status") for name, step in steps.items()}
        raise ValueError(f"no twin ran in this record's correctness section (statuses: {statuses or 'none'})")
    return curves


def relative_differences(ours: list[float], theirs: list[float]) -> list[float]:
    """Per step, |ours - theirs| / |theirs| (the curves have the same length: the same steps)."""
    if len(ours) != len(theirs):
        raise ValueError(f"the curves differ in length: {len(ours)} steps against {len(theirs)}")
    return [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]


def draw(record: dict[str, Any], stem: Path) -> list[Path]:
    """Write ``stem``.png and ``stem``.pdf; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = twin_curves(record)
    device = record["sections"].get("environment", {}).get("steps", {}).get("environment", {}).get("device_name")
    fig, axes = plt.subplots(2, len(curves), figsize=(5.5 * len(curves), 6.0), squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1]})
    for column, (name, step) in enumerate(curves.items()):
        top, bottom = axes[0][column], axes[1][column]
        x = range(1, len(step["losses"]) + 1)
        top.plot(x, step["twin_losses"], color="tab:orange", lw=2.2, label="transformers twin")
        top.plot(x, step["losses"], color="tab:blue", lw=0.9, label="leanlm")
        reference = step["cpu_fp32_reference"]
        top.plot(range(1, len(reference) + 1), reference, "k.", ms=5, label="CPU fp32 reference")
        verdict = "passed" if step.get("passed") else "FAILED"
        top.set_title(f"{TWIN_TITLES.get(name, name)}: {verdict}", fontsize=9)
        top.set_ylabel("training loss (bf16)")
        top.legend(fontsize=8)
        bottom.semilogy(x, [max(d, 1e-9) for d in relative_differences(step["losses"], step["twin_losses"])],
                        color="tab:gray", lw=0.7)
        bottom.axhline(step["curve"]["tolerance"], color="tab:red", ls="--", lw=0.8,
                       label=f"tolerance on tenth-of-run means ({step['curve']['tolerance']:g})")
        bottom.set_xlabel(f"step ({step['batch_size']} x {step['seq_len']} tokens)")
        bottom.set_ylabel("|leanlm - twin| / twin")
        bottom.legend(fontsize=8)
    fig.suptitle(f"Section 4 of the GPU check on {device or 'an unnamed device'}: same weights, same batches",
                 fontsize=10)
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    stem.parent.mkdir(parents=True, exist_ok=True)
    for path in paths:
        fig.savefig(path, dpi=130)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leanlm.benchmarks.gpucheck.figures",
                                     description="draw section 4's loss curves from a gpu_check.json")
    parser.add_argument("record", type=Path, help="a gpu_check.json")
    parser.add_argument("stem", type=Path, help="output path without suffix (writes .png and .pdf)")
    args = parser.parse_args(argv)
    try:
        record = json.loads(args.record.read_text(encoding="utf-8"))
        paths = draw(record, args.stem)
    except (OSError, ValueError) as exc:
        print(f"{args.record}: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"{args.record}: a twin's record lacks the key {exc} (is it a gpu_check.json?)", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
