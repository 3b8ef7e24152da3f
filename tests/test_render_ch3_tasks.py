"""Chapter 3's per-task tables (3.5-3.10), rendered from a synthetic tidy table (ch3_synthetic)."""

import pytest

from ch3_synthetic import BASE, PARAMS, SEED_MEAN, cells, glue_mean, render
from leanlm.reporting.reported import load_reported


@pytest.fixture(scope="module")
def config():
    from pathlib import Path

    from leanlm.config import load_config

    return load_config(Path(__file__).resolve().parents[1] / "params" / "smoke.yaml")


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
    assert cells(tex, "MHA (M)")[-1].endswith(" (0.7)") and r"\textbf" not in cells(tex, "MHA (M)")[-1]
    assert cells(tex, r"FNET$^{\mathrm{a}}$", 1)[0] == r"\textit{76.3 (0.1)}"
    csv = csv.set_index("attention")
    assert csv.loc["SHA", "cola_mean"] == pytest.approx(100 * (BASE["sha"] + SEED_MEAN + 0.006))
    assert csv.loc["SHA", "reported_cola"] == 53.8 and csv.loc["SHA", "reported_glue_avg_std"] == 0.1
    assert csv.loc["MHE-MUL (M)", "reported_glue_avg"] == 81.5
    assert csv.loc["MHA (M)", "glue_avg_mean"] == pytest.approx(glue_mean("mha", 0.02))


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
    first = csv.columns[1].removesuffix("_mean")          # the first task
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
