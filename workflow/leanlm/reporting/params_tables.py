"""Tables 3.11 and 3.12 (Appendix 3.9): the hyperparameters, read from the profile that runs.

These tables need no results: they are rendered from the params file alone (tables.yaml kind
``params``), so they cannot drift from what the profile trains with. One column per pretraining
objective (Table 3.11) or fine-tuned task family (Table 3.12), then the thesis's printed column.
The CSV names the params key of every value (``setting``), so each cell can be traced back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from leanlm.data.tasks import get_task
from leanlm.errors import ConfigError
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.reported import load_reported
from leanlm.reporting.render import PARAMS_TABLES, Table, scale_note

# Pretraining objectives of chapter 3: printed column header and the model size whose dropout applies.
OBJECTIVES = [("mlm", "MLM (encoders)", "bert"), ("causal_lm", "causal LM (decoders)", "gpt2"),
              ("translation", "translation (enc.-dec.)", "transformer")]
FINETUNE_FAMILIES = [("glue", "GLUE"), ("superglue", "SUPERGLUE"), ("squad", "SQUAD")]

EARLY_STOPPING_NOTE = ("The thesis fine-tunes \"up to 20 epochs with early stopping\" (§3.4.4) but prints no "
                       "patience: the early stopping patience row is this pipeline's choice (evaluations in a row "
                       "without improvement of the task's primary metric on the dev set).")
BATCH_NOTE = ("The profile sets the batch of one optimizer step over all GPUs (batch_size x grad_accum); the "
              "thesis's 32 per GPU on four GPUs is the text's batch of 128 (§3.4.4).")


def fmt_value(value) -> str:
    """A hyperparameter as the thesis writes it: 1e-8, 3e-5, 0.9999, 10000; lists joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != 0 and abs(value) < 0.01:
            mantissa, exponent = f"{value:e}".split("e")
            return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v) for v in value)
    return str(value).replace("_", " ")


def _warmup(settings: dict) -> str:
    value = settings.get("warmup_steps")
    if isinstance(value, dict):  # per task (SQuAD), as Table 3.12 prints it
        return ", ".join(f"{v} for {get_task(t).thesis_name}" for t, v in value.items())
    if value is not None:
        return fmt_value(value)
    return f"first {fmt_value(100 * settings['warmup_ratio'])}% steps"


def _eval_every(settings: dict) -> str:
    value = settings.get("eval_every")
    if not value:
        return "once per epoch"
    if isinstance(value, dict):
        return ", ".join(f"{v} for {get_task(t).thesis_name}" for t, v in value.items())
    return f"every {value} steps"


# (printed row label or None for rows the thesis lacks, our label, LaTeX label, params key, value); a
# tuple of keys names the first one a column sets (SQuAD's warmup_steps, else warmup_ratio).
Row = tuple[str | None, str, str, str | tuple[str, ...], Callable[[dict, dict], str]]


def _key(key: str | tuple[str, ...], settings: dict) -> str:
    if isinstance(key, str):
        return key
    return next((k for k in key if settings.get(k) is not None), key[-1])

PRETRAIN_ROWS: list[Row] = [
    ("Maximum train steps", "Maximum train steps", "", "steps", lambda s, m: f"{s['steps']} steps"),
    ("Batch size (per GPU)", "Batch size", "", "batch_size",
     lambda s, m: f"{s['batch_size'] * s.get('grad_accum', 1)} instances"),
    ("Adam ϵ", "Adam eps", r"Adam $\epsilon$", "adam_eps", lambda s, m: fmt_value(s["adam_eps"])),
    ("Adam β_1", "Adam beta1", r"Adam $\beta_1$", "adam_betas", lambda s, m: fmt_value(s["adam_betas"][0])),
    ("Adam β_2", "Adam beta2", r"Adam $\beta_2$", "adam_betas", lambda s, m: fmt_value(s["adam_betas"][1])),
    ("Sequence length", "Sequence length", "", "seq_len", lambda s, m: fmt_value(s["seq_len"])),
    ("Peak learning rate", "Peak learning rate", "", "lr", lambda s, m: fmt_value(s["lr"])),
    ("Learning rate schedule", "Learning rate schedule", "", "schedule", lambda s, m: fmt_value(s["schedule"])),
    ("Warmup steps", "Warmup steps", "", "warmup_steps", lambda s, m: _warmup(s)),
    ("Weight decay", "Weight decay", "", "weight_decay", lambda s, m: fmt_value(s["weight_decay"])),
    ("Attention Dropout", "Attention Dropout", "", "attention_dropout", lambda s, m: fmt_value(m["attention_dropout"])),
    ("Dropout", "Dropout", "", "dropout", lambda s, m: fmt_value(m["dropout"])),
    (None, "Masking probability", "", "mask_prob", lambda s, m: fmt_value(s.get("mask_prob"))),
    (None, "Gradient clipping (norm)", "", "clip_norm", lambda s, m: fmt_value(s.get("clip_norm"))),
    (None, "Label smoothing", "", "label_smoothing", lambda s, m: fmt_value(s.get("label_smoothing"))),
]

FINETUNE_ROWS: list[Row] = [
    ("Maximum train epochs", "Maximum train epochs", "", "epochs", lambda s, m: f"{s['epochs']} epochs"),
    ("Batch size (per GPU)", "Batch size", "", "batch_size", lambda s, m: f"{s['batch_size']} instances"),
    ("Adam ϵ", "Adam eps", r"Adam $\epsilon$", "adam_eps", lambda s, m: fmt_value(s["adam_eps"])),
    ("Adam β_1", "Adam beta1", r"Adam $\beta_1$", "adam_betas", lambda s, m: fmt_value(s["adam_betas"][0])),
    ("Adam β_2", "Adam beta2", r"Adam $\beta_2$", "adam_betas", lambda s, m: fmt_value(s["adam_betas"][1])),
    ("Peak learning rate", "Peak learning rate", "", "lr", lambda s, m: fmt_value(s["lr"])),
    ("Learning rate schedule", "Learning rate schedule", "", "schedule", lambda s, m: fmt_value(s["schedule"])),
    ("Warmup steps", "Warmup steps", "", ("warmup_steps", "warmup_ratio"), lambda s, m: _warmup(s)),
    ("Weight decay", "Weight decay", "", "weight_decay", lambda s, m: fmt_value(s["weight_decay"])),
    ("Attention Dropout", "Attention Dropout", "", "attention_dropout", lambda s, m: fmt_value(m["attention_dropout"])),
    ("Dropout", "Dropout", "", "dropout", lambda s, m: fmt_value(m["dropout"])),
    ("Evaluation steps", "Evaluation steps", "", "eval_every", lambda s, m: _eval_every(s)),
    (None, "Maximum sequence length", "", "max_seq_len", lambda s, m: fmt_value(s.get("max_seq_len"))),
    (None, "Early stopping patience", "", "early_stopping_patience",
     lambda s, m: fmt_value(s.get("early_stopping_patience"))),
]


def hyperparameter_table(profile: str, config: dict, *, table: str, rows: list[Row],
                         columns: list[tuple[str, str, dict, dict, str]], caption: str, thesis_align: str,
                         value_align: str = "l") -> Table:
    """``columns``: (key, header, settings, model sizes, params path prefix) per column of values."""
    reported = load_reported(table)
    notes = Notes()
    records, grid_rows = [], []
    for printed_label, label, latex_label, key, value in rows:
        values = [value(settings, model) for _, _, settings, model, _ in columns]
        thesis = reported.loc[printed_label].iloc[0] if printed_label in reported.index else "-"
        record = {"row": label, "reported_row": printed_label or ""}
        for (column_key, _, settings, _, prefix), text in zip(columns, values):
            source = "models" if key in ("dropout", "attention_dropout") else prefix
            record[column_key], record[f"{column_key}_setting"] = text, f"{source}.{_key(key, settings)}"
        record["reported"] = thesis
        records.append(record)
        note = BATCH_NOTE if table == "table_3_11" and key == "batch_size" else None
        row_label = notes.marked(Cell(latex_label, raw=True) if latex_label else Cell(label), note)
        grid_rows.append(grid_row(row_label, [Cell(v) for v in values] + [Cell(str(thesis))]))
    header_columns = [Column(header, f"Profile {profile}", align=value_align) for _, header, _, _, _ in columns]
    header_columns.append(Column(table.replace("table_", "Table ").replace("_", "."), "Thesis", align=thesis_align))
    context = grid_context(caption=caption, columns=header_columns, rows=grid_rows, notes=notes,
                           label_header="Hyperparameter", font="footnotesize")
    context["profile"] = profile
    return Table(frame=pd.DataFrame(records), context=context)


def table_3_11(profile: str, config: dict) -> Table:
    """Pretraining hyperparameters of the profile (Table 3.11) beside the thesis's."""
    missing = [f"pretrain.{objective} is set but models.{size} is not" for objective, _, size in OBJECTIVES
               if objective in config["pretrain"] and size not in config["models"]]
    if missing:  # each column prints the dropout of the model size its objective pretrains
        raise ConfigError(f"Table 3.11 shows each pretraining block beside its model's dropout: {'; '.join(missing)}; "
                          f"add the model size or remove the block")
    columns = [(objective, header, config["pretrain"][objective], config["models"][size], f"pretrain.{objective}")
               for objective, header, size in OBJECTIVES if objective in config["pretrain"]]
    caption = (f"Hyperparameters used in pretraining (Table 3.11), as the {profile} profile sets them "
               f"(params file {Path(config['_params_file']).name}), beside the thesis's (MLM); dropout is the model size's. "
               f"{scale_note(config, 'bert')}. A '-' marks a setting the thesis does not print.")
    return hyperparameter_table(profile, config, table="table_3_11", rows=PRETRAIN_ROWS, columns=columns,
                                caption=caption, thesis_align="l")


def table_3_12(profile: str, config: dict) -> Table:
    """Fine-tuning hyperparameters of the profile (Table 3.12) beside the thesis's."""
    columns = [(family, header, config["finetune"][family], config["models"].get("bert", {}),
                f"finetune.{family}")
               for family, header in FINETUNE_FAMILIES if family in config["finetune"]]
    held_out = config["data"]["tasks"].get("heldout_fraction") or 0
    if config.get("source") != "hub":
        data_note = "the packaged stand-ins fine-tune on their train split and are scored on their dev split"
    elif held_out:
        data_note = f"a hashed {held_out:.0%} of each hub train split is held out as a test split"
    else:
        data_note = ("every task fine-tunes on its full official train split and is scored on its dev split, "
                     "as the thesis")
    caption = (f"Hyperparameters used in fine-tuning (Table 3.12), as the {profile} profile sets them "
               f"(params file {Path(config['_params_file']).name}), beside the thesis's; dropout is the encoder's; "
               f"{data_note}. SQuAD's warmup is the thesis's printed step count (about 6% of 20 epochs over the "
               f"full train split's windows); each result records the warmup_steps it ran with. "
               f"{EARLY_STOPPING_NOTE} {scale_note(config, 'bert')}. A '-' marks a setting the thesis does not print.")
    return hyperparameter_table(profile, config, table="table_3_12", rows=FINETUNE_ROWS, columns=columns,
                                caption=caption, thesis_align="p{5.2cm}", value_align="p{2.2cm}")


def check_params_tables(config: dict) -> None:
    """Render every params table of the profile in memory (they read the params file alone), so a setting
    one of them needs and the profile lacks is refused by ``leanlm validate``, naming the table and the key,
    not by the render job after all training. Nothing is written."""
    for name in PARAMS_TABLES.names():
        try:
            PARAMS_TABLES.get(name)(config["profile"], config)
        except ConfigError as err:
            raise ConfigError(f"{config['_params_file']}: {name} (params/tables.yaml): {err}") from None
        except KeyError as err:
            raise ConfigError(f"{config['_params_file']}: {name} (params/tables.yaml) shows a setting the profile "
                              f"does not have: key {err} of the block it reads (e.g. models.<size> for a "
                              f"pretrain.<objective> block); add it, or remove the block that needs it") from None
