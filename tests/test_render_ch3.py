"""Chapter 3's results and hyperparameter tables, rendered from a synthetic tidy table (ch3_synthetic).

Values are chosen to be checked by hand: a scored task's primary metric is BASE[attention] + size bonus
+ 0.01 x seed + 0.001 x task index; perplexities are the thesis's own WIKITEXT-103 numbers, and the
attention counts the thesis-scale BERT-base counts, so the inverse PRR/PEoP must come out as printed.
"""

import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ch3_synthetic import BASE, PARAMS, PARAMS_FACTOR, PPL, write_tidy
from leanlm.config import load_config
from leanlm.errors import LeanLMError
from leanlm.reporting import derived
from leanlm.reporting.params_tables import fmt_value
from leanlm.reporting.render import TABLES, render_table
from leanlm.reporting.reported import load_reported

REPO = Path(__file__).resolve().parents[1]
SEED_MEAN = 0.005           # mean of 0.01 x seed over seeds 0 and 1
STD = 100 * 0.01 / math.sqrt(2)


@pytest.fixture(scope="module")
def config():
    return load_config(REPO / "params" / "smoke.yaml")


def render(root, config, name, **tidy):
    write_tidy(root, config, **tidy)
    tex_path, csv_path = render_table("smoke", name, config)
    return tex_path.read_text(), pd.read_csv(csv_path)


def cells(tex: str, label: str, after: int = 0) -> list[str]:
    """The cells of the row labelled ``label`` (``after`` = 1: the thesis row below it)."""
    lines = tex.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split(" & ")[0] == label)
    return [c.removesuffix(" \\\\") for c in lines[i + after].split(" & ")[1:]]


def plain(cell: str) -> str:
    """A cell's text without bold/italic/underline markup."""
    return re.sub(r"\\(textbf|textit|underline)\{([^{}]*)\}", r"\2", cell)


def glue_mean(attention, bonus=0.0):
    return 100 * (BASE[attention] + bonus + SEED_MEAN + 0.001 * 3.5)   # task indices 0..7


# --------------------------------------------------------------------------- every table
@pytest.mark.parametrize("name", sorted(TABLES.names()))
def test_every_results_table_renders_with_its_declared_template(scratch_root, config, name):
    from leanlm.reporting.aggregate import load

    write_tidy(scratch_root, config)
    table = TABLES.get(name)("smoke", config, load("smoke"))
    declared = yaml.safe_load((REPO / "params" / "tables.yaml").read_text())[name]
    assert table.context.get("template", f"{name}.tex.j2") == declared.get("template", f"{name}.tex.j2")
    tex, frame = render(scratch_root, config, name)
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\textit{thesis}" in tex
    assert not frame.empty and "smoke profile" in tex


# --------------------------------------------------------------------------- Table 3.1
def test_table_3_1_four_benchmarks_with_prr_peop_and_thesis_rows(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_1")
    assert tex.startswith(r"\begin{landscape}")
    assert r"\multicolumn{3}{c}{SQUAD v2.0}" in tex and r"F1$\uparrow$" in tex
    csv = csv.set_index("attention")
    mha, mhe, sha = (glue_mean(a) for a in ("mha", "mhe_mul", "sha"))
    assert csv.loc["MHE-MUL", "glue_mean"] == pytest.approx(mhe)
    assert csv.loc["MHE-MUL", "glue_std"] == pytest.approx(STD)
    assert csv.loc["MHE-MUL", "glue_prr"] == pytest.approx(100 * mhe / mha)
    assert csv.loc["MHE-MUL", "glue_peop"] == pytest.approx((mhe / sha - 1) / (PARAMS["mhe_mul"] / PARAMS["sha"] - 1))
    squad_v2 = 100 * (BASE["mhe_mul"] + SEED_MEAN + 0.001)  # one task: the family's second
    assert csv.loc["MHE-MUL", "squad_v2_mean"] == pytest.approx(squad_v2)
    assert csv.loc["MHE-MUL", "reported_squad_v2_peop"] == 22.25 and csv.loc["MHA", "reported_params"] == "28.32M"
    # reproduced row, then the thesis's: #params, then (score, PRR, PEoP) per benchmark
    assert cells(tex, "SHA")[:4] == [r"\textbf{8.85M}", f"{sha:.1f} (0.7)", f"{100 * sha / mha:.1f}", "-"]
    assert cells(tex, "MHA")[3] == f"{(mha / sha - 1) / (PARAMS['mha'] / PARAMS['sha'] - 1):.2f}"
    assert cells(tex, "MHA", 1)[:3] == [r"\textit{28.32M$^{\mathrm{a}}$}", r"\textit{\textbf{81.9}}", r"\textit{100.0}"]
    assert cells(tex, "MHE-MUL", 1)[-1] == r"\textit{\textbf{22.25}}"
    assert "prints 28.32M for MHA; its attention weights at the thesis's scale count 28,311,552 (28.31M)" in tex
    # FNet/Linear: footnote-5 extras, no thesis row, no PEoP
    fnet = next(line for line in tex.splitlines() if line.startswith("FNET"))
    assert fnet.startswith(r"FNET$^{\mathrm{b}}$ & 0 & ") and fnet.split(" & ")[4] == "-"
    assert r"\quad" not in tex.splitlines()[tex.splitlines().index(fnet) + 1]
    assert "footnote 5" in tex
    assert math.isnan(csv.loc["LINEAR", "glue_peop"])


def test_missing_run_or_seed_is_a_clear_error(scratch_root, config):
    with pytest.raises(LeanLMError, match=r"ch3_encoder-mhe_add on glue.*ch3_encoder-mhe_add/glue.json is missing"):
        render(scratch_root, config, "table_3_1", skip=lambda run, family, task, seed: run.name == "mhe_add")
    with pytest.raises(LeanLMError, match=r"ch3_encoder-sha/glue.json lacks 1 task/seed.*cola seed 1"):
        render(scratch_root, config, "table_3_5",
               skip=lambda run, family, task, seed: run.name == "sha" and task == "cola" and seed == 1)
    with pytest.raises(LeanLMError, match=r"ch3_decoder-mqa on lm.*ch3_decoder-mqa/lm.json"):
        render(scratch_root, config, "table_3_2",
               skip=lambda run, family, task, seed: run.run_id == "ch3_decoder-mqa" and family == "lm")
    with pytest.raises(LeanLMError, match=r"ch3_encdec_sizes-big_mhe_mul on translation"):
        render(scratch_root, config, "table_3_15",
               skip=lambda run, family, task, seed: run.run_id == "ch3_encdec_sizes-big_mhe_mul")


def test_a_table_needs_its_experiments_in_the_profile(scratch_root, config):
    trimmed = {**config, "_matrix": {k: v for k, v in config["_matrix"].items() if k != "ch3_encoder_large"}}
    write_tidy(scratch_root, config)
    with pytest.raises(LeanLMError, match="table_3_14 needs experiment 'ch3_encoder_large'.*key experiments"):
        render_table("smoke", "table_3_14", trimmed)
    # Table 3.5's larger-model rows are optional: without them the table still renders
    tex_path, _ = render_table("smoke", "table_3_5", trimmed)
    assert "(M)" not in tex_path.read_text()


# --------------------------------------------------------------------------- Table 3.2: inverse forms
def test_table_3_2_perplexity_uses_the_inverse_forms_and_matches_the_thesis(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_2")
    assert r"\multicolumn{3}{c}{WIKITEXT-103}" in tex and r"PPL$\downarrow$" in tex
    csv = csv.set_index("attention")
    assert csv.loc["MHA", "wikitext103_mean"] == 43.0 and csv.loc["MHA", "n_seeds"] == 2    # perplexity as is
    assert math.isnan(csv.loc["MHA", "wikitext103_std"])                                   # one seed
    assert csv.loc["MHE-MUL", "wikitext103_prr"] == pytest.approx(100 * (1 - (53.8 - 43.0) / 43.0))
    assert csv.loc["MHE-MUL", "wikitext103_peop"] == pytest.approx(
        -(53.8 / 62.0 - 1) / (PARAMS["mhe_mul"] / PARAMS["sha"] - 1))
    # The synthetic perplexities are the thesis's and the counts exact: PRR and PEoP come out as printed.
    printed = load_reported("table_3_2")
    for label in ("MHA", "EL-ATT", "MQA", "SKV", "MHE-ADD", "MHE-MUL"):
        prr, peop = (plain(c) for c in cells(tex, label)[5:7])
        assert prr == f"{printed.loc[label, 'wikitext103_prr']:.1f}", label
        assert peop == f"{printed.loc[label, 'wikitext103_peop']:.2f}", label
    assert cells(tex, "MHA")[4] == r"\textbf{43.0}"               # lowest perplexity is best
    assert PPL["sha"] == 62.0


def test_display_units_per_metric():
    assert derived.display_scale("perplexity") == 1.0 and derived.display_scale("bleu") == 100.0
    frame = pd.DataFrame({"experiment": "e", "run": ["a", "a"], "run_id": "e-a", "attention": "mha",
                          "family": "lm", "task": ["wikitext103", "ptb"], "seed": 0,
                          "metric": "perplexity", "value": [43.0, 45.0], "is_primary": True})
    assert derived.task_summary(frame, "lm")["mean"].tolist() == [43.0, 45.0]
    assert derived.is_inverse(frame, "lm")
    mixed = pd.concat([frame, frame.assign(task="x", metric="accuracy")])
    with pytest.raises(LeanLMError, match="mixes higher- and lower-is-better"):
        derived.is_inverse(mixed, "lm")


# --------------------------------------------------------------------------- Table 3.3
def test_table_3_3_bleu_with_one_decimal_peop(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_3")
    csv = csv.set_index("attention")
    assert csv.loc["MHA", "wmt14_mean"] == pytest.approx(80.0) and csv.loc["MHA", "n_seeds"] == 1
    peop = (75.0 / 70.0 - 1) / (PARAMS["mhe_mul"] / PARAMS["sha"] - 1)
    assert csv.loc["MHE-MUL", "wmt14_peop"] == pytest.approx(peop)
    assert cells(tex, "MHE-MUL")[1:] == ["75.0", f"{100 * 75 / 80:.1f}", rf"\textbf{{{peop:.1f}}}"]
    assert cells(tex, "MHE-MUL", 1)[-1] == r"\textit{\textbf{11.0}}"
    assert cells(tex, "SHA")[0] == rf"\textbf{{{2 * PARAMS['sha'] / 1e6:.2f}M}}"   # the run's own count
    assert "one seed" in tex


# --------------------------------------------------------------------------- Tables 3.5-3.10
def test_table_3_5_per_task_with_larger_models_below_a_rule(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_5")
    header = next(line for line in tex.splitlines() if line.startswith("Attention"))
    assert header.split(" & ")[1:] == ["MNLI$\\uparrow$", "QNLI$\\uparrow$", "QQP$\\uparrow$", "RTE$\\uparrow$",
                                       "SST$\\uparrow$", "MRPC$\\uparrow$", "CoLA$\\uparrow$", "STS$\\uparrow$",
                                       "GLUE Avg.$\\uparrow$ \\\\"]
    mha_sst = 100 * (BASE["mha"] + SEED_MEAN + 0.004)
    assert cells(tex, "MHA")[4] == rf"\textbf{{{mha_sst:.1f} (0.7)}}"
    assert cells(tex, "MHA", 1)[4] == r"\textit{\textbf{92.0 (0.3)}}"   # larger MHA(M) 92.0 does not compete
    assert cells(tex, "MHA", 1)[6] == r"\textit{\textbf{59.6 (1.3)}}"   # nor does its CoLA 62.5
    lines = tex.splitlines()
    large = lines.index(next(line for line in lines if line.startswith("MHA (M) &")))
    assert lines[large - 1] == r"\midrule" and lines[large + 1].split(" & ")[-1] == r"\textit{82.6 (0.4)} \\"
    assert cells(tex, "MHA (M)")[-1] == f"{glue_mean('mha', 0.02):.1f} (0.7)"      # not bold
    assert cells(tex, r"FNET$^{\mathrm{a}}$", 1)[0] == r"\textit{76.3 (0.1)}"
    csv = csv.set_index("attention")
    assert csv.loc["SHA", "cola_mean"] == pytest.approx(100 * (BASE["sha"] + SEED_MEAN + 0.006))
    assert csv.loc["SHA", "reported_cola"] == 53.8 and csv.loc["SHA", "reported_glue_avg_std"] == 0.1
    assert csv.loc["MHE-MUL (M)", "reported_glue_avg"] == 81.5


def test_table_3_6_superglue_maps_sg_rte_to_the_printed_rte(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_6")
    assert "SUPERGLUE Avg." in tex and "BoolQ$\\uparrow$" in tex
    assert cells(tex, "SHA", 1)[2] == r"\textit{62.5 (1.0)}"
    assert csv.set_index("attention").loc["MHA", "reported_sg_rte"] == 67.9


@pytest.mark.parametrize("name,experiment", [("table_3_7", "ch3_encoder"), ("table_3_8", "ch3_encoder"),
                                             ("table_3_10", "ch3_decoder")])
def test_score_peop_tables(scratch_root, config, name, experiment):
    tex, csv = render(scratch_root, config, name)
    csv = csv.set_index("attention")
    first = csv.columns[2].removesuffix("_mean")          # the first task
    score = 100 * (BASE["mhe_mul"] + SEED_MEAN)
    peop = (score / (100 * (BASE["sha"] + SEED_MEAN)) - 1) / (PARAMS["mhe_mul"] / PARAMS["sha"] - 1)
    assert csv.loc["MHE-MUL", f"{first}_peop"] == pytest.approx(peop)
    assert cells(tex, "MHE-MUL")[0] == rf"{score:.1f} (\textbf{{{peop:.2f}}})"   # best PEoP bold
    assert cells(tex, "MHA")[0].startswith(r"\underline{")                       # best score underlined
    assert cells(tex, "SHA")[0].endswith("(-)")
    printed = load_reported(name)
    column = "rte" if first == "sg_rte" else first
    assert cells(tex, "MHE-MUL", 1)[0].startswith(rf"\textit{{{printed.loc['MHE-MUL', column]:.1f} (")
    if experiment == "ch3_encoder":
        assert cells(tex, r"FNET$^{\mathrm{a}}$")[0].endswith("(-)")


def test_table_3_9_decoder_glue(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_9")
    assert cells(tex, "MHE-MUL", 1)[3] == r"\textit{\textbf{70.2 (2.5)}}"
    assert "(M)" not in tex and "FNET" not in tex
    assert csv.set_index("attention").loc["MQA", "glue_avg_mean"] == pytest.approx(glue_mean("mqa"))


# --------------------------------------------------------------------------- Tables 3.14, 3.15
def test_table_3_14_scaling(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_14")
    csv = csv.set_index("row")
    assert list(csv.index) == ["Encoder-only BASE", "Encoder-only LARGE", "Decoder-only BASE", "Decoder-only MEDIUM"]
    large_mha, large_mhe = glue_mean("mha", 0.02), glue_mean("mhe_mul", 0.02)
    assert csv.loc["Encoder-only LARGE", "glue_prr"] == pytest.approx(100 * large_mhe / large_mha)
    assert csv.loc["Decoder-only MEDIUM", "wikitext103_prr"] == pytest.approx(100 * (1 - (48.8 - 38.0) / 38.0))
    assert csv.loc["Encoder-only LARGE", "params_mha"] == 3 * PARAMS["mha"]
    assert math.isnan(csv.loc["Encoder-only BASE", "wikitext103_prr"])
    row = cells(tex, "Decoder-only BASE")
    assert row[:2] == ["28.31M", "8.88M"] and row[5:8] == ["-", "-", "-"] and row[8:11] == ["43.0", "53.8", "74.9"]
    thesis = cells(tex, "Encoder-only LARGE", 1)
    assert thesis[:5] == [r"\textit{100.66M}", r"\textit{29.96M}", r"\textit{81.5}", r"\textit{82.6}", r"\textit{98.7}"]
    assert cells(tex, "Encoder-only BASE", 1)[0] == r"\textit{28.32M$^{\mathrm{a}}$}"
    assert r"\multicolumn{3}{c}{WIKITEXT-103$\downarrow$}" in tex


def test_table_3_15_configurations(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_3_15")
    assert list(csv["thesis_row"]) == ["BASE", "BASE (d_h=32)", "BASE (d_h=128)", "4L", "8L", "12H", "BIG"]
    sizes = config["models"]
    h16 = sizes["transformer_h16"]
    assert csv.loc[1, "row"] == f"BASE (d_h={h16['head_dim']})" and csv.loc[1, "h"] == h16["n_heads"]
    big = csv.set_index("thesis_row").loc["BIG"]
    assert big["n_layers"] == sizes["transformer_big"]["n_layers"] + sizes["transformer_big"]["n_decoder_layers"]
    assert big["p_drop"] == sizes["transformer_big"]["dropout"]
    assert big["prr"] == pytest.approx(100 * (BASE["mhe_mul"] + 0.01) / (BASE["mha"] + 0.01))
    assert big["params_mha"] == PARAMS["mha"] * PARAMS_FACTOR["ch3_encdec_sizes"]
    base = cells(tex, "BASE")
    assert base[:6] == ["4", "64", "4", "16", "0.1", "600"] and base[-1] == f"{100 * 75 / 80:.1f}"
    assert cells(tex, "BASE", 1) == [r"\textit{12}", r"\textit{512}", r"\textit{8}", r"\textit{64}", r"\textit{0.1}",
                                     r"\textit{100K}", r"\textit{18.87M}", r"\textit{6.52M}", r"\textit{24.8}",
                                     r"\textit{23.6}", r"\textit{95.0}"]
    assert cells(tex, "BIG", 1)[5] == r"\textit{300K}"


# --------------------------------------------------------------------------- Tables 3.11, 3.12
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


def test_fmt_value_writes_numbers_as_the_thesis():
    assert [fmt_value(v) for v in (1e-8, 1.0e-4, 3.0e-5, 7.0e-4, 0.9999, 0.01, 0.0, 10000, "cosine_with_hard_restarts")] \
        == ["1e-8", "1e-4", "3e-5", "7e-4", "0.9999", "0.01", "0", "10000", "cosine with hard restarts"]
