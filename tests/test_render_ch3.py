"""Chapter 3's efficiency and scaling tables (3.1-3.3, 3.14, 3.15) from a synthetic tidy table (ch3_synthetic).

Values are chosen to be checked by hand: a scored task's primary metric is BASE[attention] + size bonus
+ 0.01 x seed + 0.001 x task index; perplexities are the thesis's own WIKITEXT-103 numbers, and the
attention counts the thesis-scale BERT-base counts, so the inverse PRR/PEoP must come out as printed.
"""

import math
from pathlib import Path

import pandas as pd
import pytest

from ch3_synthetic import BASE, PARAMS, PARAMS_FACTOR, PPL, SEED_MEAN, STD, cells, glue_mean, plain, render, write_tidy
from leanlm.config import load_config
from leanlm.errors import LeanLMError
from leanlm.reporting import derived
from leanlm.reporting.render import render_table
from leanlm.reporting.reported import load_reported

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config():
    return load_config(REPO / "params" / "smoke.yaml")


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
    assert csv.loc["MHA", "wikitext103_std"] == pytest.approx(0.1 / math.sqrt(2))          # two fine-tuned seeds
    assert csv.loc["MHE-MUL", "wikitext103_prr"] == pytest.approx(100 * (1 - (53.8 - 43.0) / 43.0))
    assert csv.loc["MHE-MUL", "wikitext103_peop"] == pytest.approx(
        -(53.8 / 62.0 - 1) / (PARAMS["mhe_mul"] / PARAMS["sha"] - 1))
    # The synthetic perplexities are the thesis's and the counts exact: PRR and PEoP come out as printed.
    printed = load_reported("table_3_2")
    for label in ("MHA", "EL-ATT", "MQA", "SKV", "MHE-ADD", "MHE-MUL"):
        prr, peop = (plain(c) for c in cells(tex, label)[5:7])
        assert prr == f"{printed.loc[label, 'wikitext103_prr']:.1f}", label
        assert peop == f"{printed.loc[label, 'wikitext103_peop']:.2f}", label
    assert cells(tex, "MHA")[4] == r"\textbf{43.0 (0.1)}"         # lowest perplexity is best; mean (std) over seeds
    # DESIGN §8: the caption says how the perplexities were made
    assert "after fine-tuning the decoder on each benchmark's train split, one run per seed" in tex
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
    steps = str(config["pretrain"]["translation"]["steps"])
    assert base[:6] == ["4", "64", "4", "16", "0.1", steps] and base[-1] == f"{100 * 75 / 80:.1f}"
    assert cells(tex, "BASE", 1) == [r"\textit{12}", r"\textit{512}", r"\textit{8}", r"\textit{64}", r"\textit{0.1}",
                                     r"\textit{100K}", r"\textit{18.87M}", r"\textit{6.52M}", r"\textit{24.8}",
                                     r"\textit{23.6}", r"\textit{95.0}"]
    assert cells(tex, "BIG", 1)[5] == r"\textit{300K}"


def test_table_3_2_without_the_decoders_glue_shows_the_perplexities_only(scratch_root):
    """signal's cpu subset fine-tunes the ch. 3 decoders on WikiText-103 and PTB only: Table 3.2 leaves out
    its GLUE block and renders the two perplexity blocks from the runs that were made."""
    from ch3_synthetic import write_tidy as write
    from leanlm.reporting.aggregate import load
    from leanlm.reporting.render import TABLES, write_table

    cpu = load_config(scratch_root / "params" / "signal.yaml", subset="cpu")
    frame = write(scratch_root, cpu)
    assert set(frame.loc[frame["experiment"] == "ch3_decoder", "family"]) == {"lm"}
    tex_path, csv_path = write_table("signal", "table_3_2", TABLES.get("table_3_2")("signal", cpu, load("signal")))
    tex = tex_path.read_text()
    assert r"\multicolumn{3}{c}{WIKITEXT-103}" in tex and r"\multicolumn{3}{c}{PENN TREEBANK}" in tex
    assert "GLUE}" not in tex
    csv = pd.read_csv(csv_path).set_index("attention")
    # 43.0 + 0.1 x (seed - 0.5) over signal's three seeds
    assert csv.loc["MHA", "wikitext103_mean"] == pytest.approx(43.05) and not any(c.startswith("glue_") for c in csv.columns)
