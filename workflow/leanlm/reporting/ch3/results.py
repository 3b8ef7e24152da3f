"""Shared pieces of chapter 3's results tables: benchmark blocks, their summaries, labels and notes.

A *block* is one benchmark column group of a table (GLUE, SQUAD v1.1, WIKITEXT-103, WMT-14): the
family it comes from in the tidy table, the tasks averaged (or one task), and where the thesis's
printed numbers for it sit in params/reported/<table>.csv. :func:`block_summary` checks that every
run, task and seed is there and returns per-run mean, std, PRR and PEoP (§3.4.6; the inverse forms
where the metric is lower-is-better, e.g. perplexity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from leanlm.errors import LeanLMError
from leanlm.reporting import derived
from leanlm.reporting.ch3.counts import printed_count_note, thesis_count
from leanlm.reporting.grid import Notes
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import require_results, run_label
from leanlm.reporting.reported import reported_row, thesis_label
from leanlm.runs import Run

# Lee-Thorp et al.'s token mixers: the thesis's footnote 5 baselines. They have no softmax heads to
# count against SHA, so PEoP is not defined for them (the thesis prints "(-)").
TOKEN_MIXERS = ("fnet", "linear")
FOOTNOTE_5 = ("Token-mixing baseline of Lee-Thorp et al. (2022), the thesis's footnote 5, run where the matrix "
              "has it: the thesis reports it per task only (Tables 3.5-3.8), and PEoP is not defined for it.")


def lm_protocol(config: dict) -> str:
    """How the lm columns' perplexities were made (DESIGN §8), for the captions of Tables 3.2 and 3.14."""
    lm = config.get("finetune", {}).get("lm", {})
    how = ("after fine-tuning the decoder on each benchmark's train split, one run per seed"
           if lm.get("fine_tune") is not None else "of the pretrained decoder zero-shot, one run")
    return f"test perplexity {how}, stride {lm.get('stride', 256)}"


def averaged_epochs(config: dict) -> int:
    """How many epoch-end checkpoints the translation runs' BLEU is the mean of (the thesis: five)."""
    return config.get("pretrain", {}).get("translation", {}).get("average_last_epochs", 1)


def is_extra(run: Run) -> bool:
    return run.attention in TOKEN_MIXERS


@lru_cache(maxsize=64)
def _task_runner(family: str, task: str):
    # Imported here: the runners pull in the training stack, which only this question needs.
    from leanlm.plugins import TASK_RUNNERS, runner_name

    return TASK_RUNNERS.get(runner_name(family, task))


def family_seeds(config: dict, family: str, tasks) -> list[int]:
    """The seeds a family's results hold: all of the profile's, or the first where the result does
    not depend on the seed (BLEU, zero-shot perplexity: their runners say so for the family's settings)."""
    seeds = list(config["seeds"])
    settings = config.get("finetune", {}).get(family, {})
    return seeds if any(_task_runner(family, t).is_seeded(settings) for t in tasks) else seeds[:1]


@dataclass(frozen=True)
class Block:
    """One benchmark column group: score, PRR, PEoP.

    ``tasks`` None averages the profile's tasks of ``family`` (GLUE Avg.); a tuple picks tasks
    (one SQuAD version, one LM corpus). ``reported`` is the prefix of the block's columns in the
    reported CSV ("" for a table with one block) and ``reported_score`` the score column's suffix.
    """

    key: str
    title: str
    family: str
    tasks: tuple[str, ...] | None
    metric: str
    reported: str
    reported_score: str

    def task_list(self, config: dict) -> list[str]:
        return list(self.tasks) if self.tasks is not None else list(config["finetune"][self.family]["tasks"])

    def available(self, config: dict, experiment: str) -> bool:
        """Whether the experiment evaluates on this block in this profile."""
        if self.family not in config["_matrix"][experiment]["finetune"] or self.family not in config["finetune"]:
            return False
        return self.tasks is None or set(self.tasks) <= set(config["finetune"][self.family]["tasks"])

    def reported_column(self, what: str) -> str:
        suffix = self.reported_score if what == "score" else what
        return f"{self.reported}_{suffix}" if self.reported else suffix


def block_summary(tidy: pd.DataFrame, profile: str, config: dict, table: str, selected: list[Run],
                  block: Block) -> tuple[pd.DataFrame, bool]:
    """Per run (indexed by run_id, in ``selected`` order): mean, std, n_seeds, prr, peop, params_attention.

    Returns the summary and whether the block's metric is lower-is-better. Every run, task and seed
    must be present (a clear error names the one that is not).
    """
    tasks = block.task_list(config)
    seeds = family_seeds(config, block.family, tasks)
    primary = require_results(tidy, profile, table, selected, block.family, tasks, seeds)
    inverse = derived.is_inverse(primary, block.family, tasks)
    summary = derived.with_efficiency(derived.family_summary(primary, block.family, tasks), inverse=inverse)
    summary = summary.set_index("run_id").loc[[r.run_id for r in selected]]
    extras = [r.run_id for r in selected if is_extra(r)]
    summary.loc[extras, "peop"] = math.nan
    return summary, inverse


def printed(rows: list, column: str) -> list:
    """The thesis's value of ``column`` for each row (NaN where the row or the value is absent)."""
    out = []
    for row in rows:
        value = math.nan if row is None or column not in row.index else row[column]
        out.append(math.nan if isinstance(value, str) and value.strip() in ("", "-") else value)
    return out


def thesis_rows(reported: pd.DataFrame, selected: list[Run], suffix: str = "") -> list:
    """The reported row of each run: by its attention's printed label (+ ``suffix``, e.g. "(M)").

    A run that is not simply its attention (a renamed variant) has no thesis row.
    """
    rows = []
    for run in selected:
        if run.name != run.attention:
            rows.append(None)
        elif not suffix:
            rows.append(reported_row(reported, run.attention))
        else:
            label = thesis_label(run.attention)
            match = [key for key in (f"{label}{suffix}", f"{label} {suffix}") if key in reported.index]
            rows.append(reported.loc[match[0]] if match else None)
    return rows


def label_cell(run: Run, notes: Notes, suffix: str = "") -> Cell:
    """The row label (thesis name), marked with footnote 5 for token-mixing baselines."""
    label = run_label(run) + (f" {suffix}" if suffix else "")
    return notes.marked(Cell(label), FOOTNOTE_5 if is_extra(run) else None)


def printed_params_cells(printed_values: list, runs: list[Run], notes: Notes, cells: list[Cell]) -> list[Cell]:
    """Mark the printed #params cells that are not the thesis-scale count rounded (MHA: 28.32M)."""
    out = []
    for value, run, cell in zip(printed_values, runs, cells):
        note = None
        if isinstance(value, str) and value not in ("", "-"):
            count = thesis_count(run.size, run.attention).params
            note = printed_count_note(value, count, thesis_label(run.attention))
        out.append(notes.marked(cell, note))
    return out


def seeds_phrase(config: dict, seeded: bool = True) -> str:
    n = len(config["seeds"]) if seeded else 1
    return f"mean (std) over {n} seeds" if n > 1 else "one seed"


def require_named_runs(selected: list[Run], names: tuple[str, ...], table: str, experiment: str) -> list[Run]:
    """The runs called ``names`` (e.g. mha, mhe_mul) in that order, or an error naming the missing one."""
    by_name = {r.name: r for r in selected}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise LeanLMError(
            f"{table} needs runs {', '.join(missing)} of experiment {experiment}, which the matrix "
            "(params/experiments/ch3.yaml) does not define; add them back"
        )
    return [by_name[n] for n in names]
