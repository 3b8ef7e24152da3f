"""The device protocol of the GPU check: each section's seconds and the device calls that run them.

Apart from check.py (which runs the sections) so that bundle.py, which prints the calls, needs neither
the sections' code nor check.py, and check.py can make bundles (``--tiny``) without a circle.
"""

from __future__ import annotations

# Each section's time in the two device calls, in priority order; its share of a budget (normalised over
# the sections chosen) and, summed, a call's default budget. Measured on the H200
# (docs/results/gpu/2026-11-28-h200): environment 33.5 s (30.6 of it the SDPA kernels); bert 167.5 s with
# one compile (eager 8.1 + 6.4 s, compiled MHA 153.0 s); decoder 55.7 s; correctness 115.2 s; pipeline
# 290 s for ch. 2's and ch. 3's commands (28 + 74, 57 + 98 s of wall time) and 33 s of ch. 4's before its kill. So call 1
# (sections 1-4, 450 s) holds one compiled BERT-base at 153 s and leaves the second the rest of bert's
# 220 s: it runs if each compile takes ~105 s or less.
SECTION_SECONDS: dict[str, float] = {"environment": 40.0, "bert": 220.0, "decoder": 65.0, "correctness": 125.0,
                                     "pipeline": 300.0}

# The device calls, in order: each one `run` of the device tool (docs/gpu-check.md), with the default
# budget of its sections (450 s, 300 s). A session's 900 s of device time then holds the machine's start
# (about 45 s), both calls with their installs (about 5 s each) and the pause between them, with about a
# minute to spare for a sub-step that outlasts its estimate.
DEVICE_CALLS: tuple[tuple[str, ...], ...] = (("environment", "bert", "decoder", "correctness"), ("pipeline",))


def section_seconds(sections: tuple[str, ...]) -> float:
    """The seconds of ``sections`` in the protocol: the default budget of a check that runs them."""
    return sum(seconds for name, seconds in SECTION_SECONDS.items() if name in sections)
