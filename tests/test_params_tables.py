"""Tables 3.11 and 3.12: the hyperparameters, rendered from the profile's params file alone."""

import math

import pandas as pd
import pytest

from leanlm.config import load_config
from leanlm.reporting.params_tables import fmt_value
from leanlm.reporting.render import PARAMS_TABLES, render_table
from leanlm.reporting.reported import load_reported


def _setting(config, path):
    value = config
    for part in path.split("."):
        value = value[part]
    return value


@pytest.mark.parametrize("profile", ["smoke", "paper"])
def test_hyperparameter_tables_are_the_profiles_values(scratch_root, profile):
    config = load_config(scratch_root / "params" / f"{profile}.yaml")
    # no results needed: rendered from the params file alone
    for name in ("table_3_11", "table_3_12"):
        tex_path, csv_path = render_table(profile, name, config)
        frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False).set_index("row")
        assert r"\textit{thesis}" not in tex_path.read_text() and "Hyperparameter" in tex_path.read_text()
        printed = load_reported(name)
        for label, row in frame.iterrows():
            expected = printed.iloc[:, 0].get(row["reported_row"], "-") if row["reported_row"] else "-"
            assert row["reported"] == str(expected), label
    t311 = pd.read_csv(scratch_root / "paper_tables" / profile / "table_3_11.csv", keep_default_na=False).set_index("row")
    mlm = config["pretrain"]["mlm"]
    assert t311.loc["Maximum train steps", "mlm"] == f"{mlm['steps']} steps"
    assert t311.loc["Adam beta2", "mlm"] == fmt_value(mlm["adam_betas"][1])
    assert t311.loc["Adam beta2", "mlm_setting"] == "pretrain.mlm.adam_betas"
    assert t311.loc["Dropout", "causal_lm"] == fmt_value(config["models"]["gpt2"]["dropout"])
    for column in ("mlm", "causal_lm", "translation"):
        for label in ("Warmup steps", "Weight decay", "Sequence length", "Peak learning rate"):
            setting = t311.loc[label, f"{column}_setting"]
            assert t311.loc[label, column] == fmt_value(_setting(config, setting)), (column, label)
    t312 = pd.read_csv(scratch_root / "paper_tables" / profile / "table_3_12.csv", keep_default_na=False).set_index("row")
    caption = PARAMS_TABLES.get("table_3_12")(profile, config).context["caption"]
    assert "up to 20 epochs with early stopping" in caption and "but prints no patience" in caption
    for family in ("glue", "superglue", "squad"):
        settings = config["finetune"][family]
        assert t312.loc["Peak learning rate", family] == fmt_value(settings["lr"])
        assert t312.loc["Maximum train epochs", family] == f"{settings['epochs']} epochs"
    if profile == "paper":  # the paper profile is Table 3.11/3.12 itself
        for label, printed in [("Maximum train steps", "1000000 steps"), ("Adam eps", "1e-8"), ("Adam beta2", "0.9999"),
                               ("Sequence length", "512"), ("Warmup steps", "10000"), ("Weight decay", "0.01"),
                               ("Learning rate schedule", "linear"), ("Dropout", "0.1")]:
            assert t311.loc[label, "mlm"] == t311.loc[label, "reported"] == printed, label
        assert t311.loc["Peak learning rate", "mlm"] == "1e-4"
        assert t312.loc["Peak learning rate", "glue"] == "3e-5" and t312.loc["Peak learning rate", "superglue"] == "5e-5"
        assert t312.loc["Evaluation steps", "glue"] == "2455 for MNLI, 655 for QNLI, 2275 for QQP, 48 for RTE, " \
                                                       "421 for SST, 69 for MRPC, 162 for CoLA, 108 for STS"
        assert t312.loc["Warmup steps", "glue"] == "first 6% steps"
        # SQuAD warms up for the thesis's printed step counts (Table 3.12), not 6% of our step count
        assert t312.loc["Warmup steps", "squad"] == "3327 for SQUAD v1.1, 4950 for SQUAD v2.0"
        assert t312.loc["Warmup steps", "squad_setting"] == "finetune.squad.warmup_steps"


def test_squad_warmup_is_the_printed_step_count():
    from leanlm.stages.finetune import finetune_train_config

    config = load_config("params/paper.yaml")
    squad, glue = config["finetune"]["squad"], config["finetune"]["glue"]
    # SQuAD v1.1's full train split is ~88.5k windows of 384 tokens (stride 128): 2,767 steps of 32 per epoch
    v1 = finetune_train_config(squad, "squad_v1", "run", 0, 88_524)
    assert (v1.warmup_steps, v1.total_steps) == (3327, 20 * 2767)
    assert finetune_train_config(squad, "squad_v2", "run", 0, 131_754).warmup_steps == 4950
    # GLUE keeps the 6% rule, derived from the (full) train split
    assert finetune_train_config(glue, "rte", "run", 0, 2490).warmup_steps == math.ceil(0.06 * 20 * 78)


def test_fmt_value_writes_numbers_as_the_thesis():
    assert [fmt_value(v) for v in (1e-8, 1.0e-4, 3.0e-5, 7.0e-4, 0.9999, 0.01, 0.0, 10000, "cosine_with_hard_restarts")] \
        == ["1e-8", "1e-4", "3e-5", "7e-4", "0.9999", "0.01", "0", "10000", "cosine with hard restarts"]
