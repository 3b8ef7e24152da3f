"""``ch2_bert_hash_card``: NeuML's BERT-Hash model card table reproduced beside the card's own numbers.

The card (../shared/seeds/model_card_bert_hash_nano.txt) compares bert-tiny with bert-hash femto, pico
and nano on MNLI (matched / mismatched accuracy), MRPC (F1 / accuracy) and SST-2 (accuracy), with each
model's parameters. Experiment ``ch2_bert_hash_card`` (params/experiments/ch2.yaml) trains the four at the
card's sizes; this table prints, per model, our row and the card's below it
(params/reported/ch2_bert_hash_card.csv, the card's fractions, shown x100 as ours).

- Parameters: counted as the card counts them (``model.bert.parameters()``: embeddings, encoder and pooler,
  no task head) on the trained model's recorded config, so at the profile's vocabulary.
- MNLI-m, SST-2 and MRPC accuracy: the tasks' primary metrics from the tidy table, mean (std) over seeds.
- MRPC F1: not a metric of the MRPC task set (params/tasks/glue.yaml prints the thesis's accuracy), so it
  is recomputed from each seed's dev predictions kept in glue.json (``per_example``: the final evaluation,
  of the restored best state, which is what the accuracy scores), with the metric the project's QQP uses.
- MNLI-mm: printed only where the MNLI task set has a mismatched dev set; the project's has the matched
  one (GLUE's ``validation_matched``), so ours is "-" and the caption says why.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.evaluation.metrics import compute
from leanlm.reporting import derived
from leanlm.reporting.ch2.results import FAMILY, model_dict, read_record, record_path
from leanlm.reporting.ch2.tables import is_missing, printed_values
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.reported import load_reported
from leanlm.reporting.render import Table, column_cells, fmt_mean_std, fmt_number, require_results, scale_note
from leanlm.runs import Run, finetune_seeds, finetune_settings, runs

TABLE = EXPERIMENT = "ch2_bert_hash_card"
BASELINE = "bert_tiny"
UP = "↑"
# (column key, header, group, task, how ours is got): "primary" from the tidy table, "f1" recomputed from
# the kept dev predictions, "mismatched" only where the MNLI task set has a mismatched dev set.
COLUMNS = (("mnli_m", "m", "MNLI acc", "mnli", "primary"), ("mnli_mm", "mm", "MNLI acc", "mnli", "mismatched"),
           ("mrpc_f1", "F1", "MRPC", "mrpc", "f1"), ("mrpc_acc", "acc", "MRPC", "mrpc", "primary"),
           ("sst2", "acc", "SST-2", "sst2", "primary"))


def card_runs(config: dict) -> list[Run]:
    """The experiment's runs in the matrix's (the card's) order: baseline, femto, pico, nano."""
    if EXPERIMENT not in config.get("_matrix", {}):
        raise LeanLMError(f"{TABLE} needs experiment {EXPERIMENT!r}, which profile {config['profile']!r} does not "
                          f"run; add it to key experiments of {config.get('_params_file', 'the profile')}")
    return [r for r in runs(config) if r.experiment == EXPERIMENT]


def card_key(run: Run) -> str:
    """The card's row label of a run: bert_hash_nano -> bert-hash-nano, bert_tiny -> bert-tiny."""
    return run.name.replace("_", "-")


def card_parameters(profile: str, run: Run) -> int:
    """The run's parameters as the card counts them (its BertModel: embeddings, layers, pooler)."""
    from leanlm.errors import ConfigError
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.counting import total_parameters
    from leanlm.modeling.encoder import BertEncoder
    import torch

    try:
        config = ModelConfig.from_dict(model_dict(profile, run), where=f"{record_path(profile, run.run_id, FAMILY)} key model")
    except ConfigError as exc:
        raise LeanLMError(f"{exc}; rerun the run's jobs with the current version") from None
    with torch.device("meta"):
        return total_parameters(BertEncoder(config))


def format_card_count(n) -> str:
    """Millions cut to three decimals, as the card prints them (nano's 969,504 -> 0.969M)."""
    return "-" if is_missing(n) else f"{math.floor(float(n) / 1e3) / 1e3:.3f}M"


def seed_f1(profile: str, run: Run, task: str, seeds: Sequence[int]) -> list[float]:
    """Per seed, F1 (x100) of ``task``'s final dev predictions kept in glue.json; an error names what lacks them."""
    record = read_record(profile, run.run_id, FAMILY)
    path = record_path(profile, run.run_id, FAMILY)
    kept = {}
    for result in record.get("results") or []:
        if isinstance(result, dict) and result.get("task") == task:
            data = (result.get("per_example") or {}).get("data") or {}
            if "prediction" in data and "reference" in data:
                kept[int(result["seed"])] = 100.0 * compute("f1", data["prediction"], data["reference"])
    missing = [s for s in seeds if s not in kept]
    if missing:
        raise LeanLMError(f"{TABLE}: {path} keeps no {task} dev predictions (per_example) for seed(s) "
                          f"{', '.join(map(str, missing))}, from which the card's F1 is computed; rerun "
                          f"`leanlm finetune --run {run.run_id} --family {FAMILY}`")
    return [kept[s] for s in seeds]


def mismatched_split(task: str = "mnli") -> str | None:
    """The mismatched dev split of the MNLI task set, if it has one (the project's: none)."""
    validation = str(get_task(task).hub.get("validation", ""))
    return validation if validation.endswith("mismatched") else None


def our_scores(profile: str, config: dict, tidy: pd.DataFrame, card: list[Run]) -> dict[str, tuple[list, list]]:
    """Column key -> (means, stds) per run, in printed units; NaN where the project has no such number."""
    settings = finetune_settings(config, card[0], FAMILY)
    tasks, seeds = list(settings["tasks"]), finetune_seeds(config, card[0], FAMILY)
    primary = require_results(tidy, profile, TABLE, card, FAMILY, tasks, seeds)
    summary = derived.task_summary(primary, FAMILY).set_index(["run_id", "task"])
    nan = [math.nan] * len(card)
    out = {}
    for key, _, _, task, how in COLUMNS:
        if how == "primary":
            out[key] = ([summary.loc[(r.run_id, task), "mean"] for r in card],
                        [summary.loc[(r.run_id, task), "std"] for r in card])
        elif how == "f1":
            per_seed = [seed_f1(profile, r, task, seeds) for r in card]
            out[key] = ([float(np.mean(v)) for v in per_seed],
                        [float(np.std(v, ddof=1)) if len(v) > 1 else math.nan for v in per_seed])
        else:  # mismatched: the MNLI task set scores the matched dev set only
            out[key] = (nan, nan)
    return out


def ch2_bert_hash_card(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """The BERT-Hash card's table: parameters, MNLI m/mm, MRPC F1/acc, SST-2, ours above the card's."""
    card = card_runs(config)
    reported = load_reported(TABLE)
    scores = our_scores(profile, config, tidy, card)
    params = [card_parameters(profile, r) for r in card]
    keys = [card_key(r) for r in card]
    printed = {key: [printed_values(reported, k, [key])[0] for k in keys] for key, *_ in COLUMNS}
    printed_params = [printed_values(reported, k, ["params"])[0] for k in keys]

    frame = pd.DataFrame({"model": keys, "run_id": [r.run_id for r in card], "params": params,
                          "reported_params": printed_params})
    for key, *_ in COLUMNS:
        frame[f"{key}_mean"], frame[f"{key}_std"] = scores[key]
        frame[f"reported_{key}"] = printed[key]

    ours = [column_cells([format_card_count(n) for n in params], params, False, 3)]
    theirs = [[Cell("-" if is_missing(v) else str(v)) for v in printed_params]]
    for key, *_ in COLUMNS:
        means, stds = scores[key]
        ours.append(column_cells([fmt_mean_std(m, s) for m, s in zip(means, stds)], means, True, 1))
        shown = [math.nan if is_missing(v) else 100.0 * float(v) for v in printed[key]]
        theirs.append(column_cells([fmt_number(v, 2) for v in shown], shown, True, 2))

    notes = Notes()
    rows = []
    for i, run in enumerate(card):
        note = None
        if run.name == BASELINE:
            note = ("The card's baseline is Google's bert-tiny checkpoint (google/bert_uncased_L-2_H-128_A-2); "
                    "here a model of its shape pretrained with MLM by the pipeline, as the hash models are.")
        label = notes.marked(Cell(keys[i]), note)
        rows.append(grid_row(label, [c[i] for c in ours], [c[i] for c in theirs] if keys[i] in reported.index else None))
    columns = [Column("Params", align="r")] + [Column(header, group=group, arrow=UP) for _, header, group, *_ in COLUMNS]
    context = grid_context(caption=caption(config, card), columns=columns, rows=rows, notes=notes,
                           label_header="Model", font="footnotesize", thesis_label="card")
    context["profile"] = profile
    return Table(frame=frame, context=context)


def caption(config: dict, card: list[Run]) -> str:
    settings = finetune_settings(config, card[0], FAMILY)
    seeds = finetune_seeds(config, card[0], FAMILY)
    mismatched = mismatched_split()
    mm = ("" if mismatched else
          f"MNLI mismatched is not measured: the project's MNLI task set has the matched dev set only "
          f"({get_task('mnli').hub.get('validation')}), so ours prints '-'. ")
    seed_text = f"mean (std) over {len(seeds)} fine-tuning seeds" if len(seeds) > 1 else "one fine-tuning seed"
    return (
        "NeuML's BERT-Hash model card reproduced (a table the thesis lacks): bert-tiny and bert-hash femto, pico "
        "and nano at the card's sizes, each pretrained with MLM, GLUE dev x100, each row above the card's own "
        "(italic). Parameters as the card counts them (the BERT model: embeddings, encoder and pooler, no task "
        f"head), at this profile's vocabulary (the card: BERT's 30,522). Ours: {seed_text}, each scored at its "
        f"best epoch, fine-tuned {settings['epochs']} epoch(s) at lr {settings['lr']:g}, batch "
        f"{settings['batch_size']}, {settings['max_seq_len']} tokens (the card: one run_glue run, 4 epochs at "
        f"1e-4, batch 32, 128 tokens). MRPC F1 is computed from the kept dev predictions (positive class: "
        f"equivalent). {mm}{scale_note(config, card[0].size)}. Bold: best per column."
    )
