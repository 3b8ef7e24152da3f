"""Ch. 2's pretraining speed as the pipeline measures it (Table 2.3's PT columns and the speed claims): the
settings of a profile's ``speed`` block and the record the rule ``pretraining_speed`` writes.

The measurement itself is :mod:`leanlm.benchmarks.objective_speed` (BERT-MLM, BERT-S+R and the HashFormers
timed in interleaved rounds, the same batch for every model, per sample, after warm-up rounds); this module
is what the readers (:mod:`leanlm.claims.speed`, :mod:`leanlm.reporting.ch2.speed`) share: where the record
lies, what settings it must have been made with, and each run's time per sample in every round.

Why not the training wall clock: pretraining jobs run at different batch sizes (MLM's and S+R's blocks
differ), on machines shared with other jobs, and at smoke/signal sizes where the vocabulary head, the
difference between the objectives, costs nothing; a time per sample from them compares machines and loads
as much as objectives.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from leanlm import paths
from leanlm.errors import DataError, LeanLMError

# The experiment whose pretrained runs are timed: Table 2.3's rows (BERT-MLM, BERT-S+R, HashFormers).
EXPERIMENT = "ch2_hashformers"
OBJECTIVES = ("mlm", "shuffle_random")
# Where MLM's vocabulary projection runs: over every position, as the thesis's models computed it
# (transformers' BertForMaskedLM / RobertaForMaskedLM, which the official HashFormers code trains), or at
# the masked positions only (~15% of tokens), as this project's BertForMLM does.
MLM_HEADS = ("all", "labelled")
# A profile's `speed` block laid over these; seq_len and batch_size default to its S+R pretraining's.
DEFAULTS = {"rounds": 10, "warmup_rounds": 1, "steps": 1, "mlm_head": "all"}


def speed_settings(config: dict) -> dict:
    """The settings of the profile's timing: its ``speed`` block over :data:`DEFAULTS`, the sequence length
    and batch size of its ``pretrain.shuffle_random`` block where the block names none (one batch for every
    model: a per-sample time at MLM's batch against S+R's would compare batch sizes too)."""
    block = dict(config.get("speed") or {})
    sr = (config.get("pretrain") or {}).get("shuffle_random") or {}
    settings = {**DEFAULTS, "seq_len": sr.get("seq_len"), "batch_size": sr.get("batch_size"), **block}
    where = f"{config.get('_params_file', 'the profile')}: speed"
    if settings["mlm_head"] not in MLM_HEADS:
        raise LeanLMError(f"{where}.mlm_head={settings['mlm_head']!r} must be one of {', '.join(MLM_HEADS)}")
    for key in ("rounds", "steps", "seq_len", "batch_size"):
        if not isinstance(settings[key], int) or isinstance(settings[key], bool) or settings[key] < 1:
            raise LeanLMError(f"{where}.{key}={settings[key]!r} must be a positive integer (a missing seq_len or "
                              f"batch_size comes from pretrain.shuffle_random)")
    if settings["rounds"] < 2:
        raise LeanLMError(f"{where}.rounds={settings['rounds']} must be at least 2: the interval is over rounds")
    if not isinstance(settings["warmup_rounds"], int) or settings["warmup_rounds"] < 0:
        raise LeanLMError(f"{where}.warmup_rounds={settings['warmup_rounds']!r} must be an integer >= 0")
    return settings


def speed_runs(config: dict) -> list[str]:
    """The run ids the profile times: the pretrained MLM and S+R runs of :data:`EXPERIMENT`, less absent ones."""
    from leanlm.runs import runs

    absent = config.get("absent_runs") or {}
    return [r.run_id for r in runs(config) if r.experiment == EXPERIMENT and r.objective in OBJECTIVES
            and r.run_id not in absent]


def speed_steps(config: dict) -> int:
    """Training steps each timed model takes: one counting its head's work, the warm-up and timed rounds."""
    s = speed_settings(config)
    return 1 + (s["warmup_rounds"] + s["rounds"]) * s["steps"]


def speed_path(profile: str) -> Path:
    return paths.results_dir(profile) / "speed" / f"{EXPERIMENT}.json"


def read_speed(config: dict, required: bool = True) -> dict | None:
    """The profile's speed record, checked: of this profile, made with its current settings, a time per
    sample for each of ``rounds`` rounds of every run it lists, all finite and positive. None where absent
    and not ``required``."""
    path = speed_path(config["profile"])
    if not path.is_file():
        if required:
            raise LeanLMError(f"no pretraining speed record ({path}); run `snakemake {path}` (rule pretraining_speed)")
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not readable JSON ({exc}); rerun its job (rule pretraining_speed)") from None
    rerun = f"rerun its job (`snakemake --forcerun pretraining_speed {path}`)"
    if record.get("profile") != config["profile"]:
        raise DataError(f"{path}: made for profile {record.get('profile')!r}, not {config['profile']!r}; {rerun}")
    settings = speed_settings(config)
    if record.get("settings") != settings:
        raise DataError(f"{path}: made with settings {record.get('settings')}, but the profile's are {settings}; "
                        f"{rerun}")
    for run_id, times in (record.get("ms_per_sample") or {}).items():
        if (not isinstance(times, list) or len(times) != settings["rounds"]
                or not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times)):
            raise DataError(f"{path}: ms_per_sample of {run_id} must be {settings['rounds']} positive numbers (one "
                            f"per round), got {times!r}; {rerun}")
    return record


def round_times(record: dict, run_id: str) -> list[float] | None:
    """``run_id``'s time per sample (ms) in each round, or None where the record did not time it."""
    times = (record.get("ms_per_sample") or {}).get(run_id)
    return None if times is None else [float(t) for t in times]


def median_ms(record: dict, run_id: str) -> float:
    """``run_id``'s time per sample (ms): the median over rounds; NaN where it was not timed."""
    times = round_times(record, run_id)
    return math.nan if times is None else statistics.median(times)


def protocol_text(record: dict) -> str:
    """One sentence on how the record timed, for captions and reports."""
    s = record["settings"]
    head = ("MLM's vocabulary head over every position, as the thesis's models" if s["mlm_head"] == "all"
            else "MLM's vocabulary head at the masked positions only, as this project's BertForMLM")
    return (f"PT: one training step (forward, backward, AdamW) per sample at batch {s['batch_size']} x "
            f"{s['seq_len']} tokens for every model, {s['rounds']} interleaved rounds of {s['steps']} step(s) "
            f"after {s['warmup_rounds']} warm-up round(s), median over rounds, on {record.get('device', '?')}; "
            f"{head}")
