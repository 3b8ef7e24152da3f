"""Chapter 2's tables: Table 2.2's counts at the thesis's scale (analytic), Tables 2.1, 2.2, 2.3, 2.6
and the side-by-side table from a synthetic profile's results and run records, Tables 2.4/2.5 from params.

The synthetic profile is the smoke profile running the ch. 2 matrix (params/experiments/ch2.yaml,
whose run names reporting relies on), with a fine-tuning variant of three seeds; CANINE-C is absent,
as in every offline profile. Scores, times and counts are chosen to be checked by hand:

- GLUE primary metric of run r, task i, seed s: BASE[r] + 0.01 s + 0.002 i (fractions);
- pretraining seconds per sample: PT[r] / 1000 (so ms = PT[r]); inference: (1 + 0.1 i) x INFER[r] ms.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ch3_synthetic import cells, plain
from leanlm.config import load_config
from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.modeling.config import ModelConfig
from leanlm.reporting.aggregate import COLUMNS, load
from leanlm.reporting.analytic import ANALYTIC
from leanlm.reporting.ch2.speed import untimed_reason
from leanlm.reporting.render import PARAMS_TABLES, TABLES, write_table
from leanlm.runs import absent_runs, runs

REPO = Path(__file__).resolve().parents[1]
VOCAB = 4096
CANINE_ABSENT = "CANINE-C needs the hub checkpoint google/canine-c; profile smoke is offline (source: packaged)"
# The matrix of params/experiments/ch2.yaml, the pipeline's contract with reporting (run names fixed).
MATRIX = yaml.safe_load((REPO / "params" / "experiments" / "ch2.yaml").read_text())
HASH_RUNS = [f"{h}_{v}" for h in ("md5", "lsh") for v in ("emb_50k", "emb_1k", "pool", "add", "proj")]
BASE = {"bert_mlm": 0.80, "bert_sr": 0.79, "proformer": 0.50, "bert_hash_femto": 0.60, "bert_hash_pico": 0.62,
        "bert_hash_nano": 0.64, "eelbert": 0.66,
        **{name: 0.70 + 0.01 * i for i, name in enumerate(HASH_RUNS)}}
PT = {name: 10.0 for name in BASE} | {"bert_mlm": 25.0, "md5_proj": 5.0}
INFER = {name: 2.0 for name in BASE} | {"bert_mlm": 4.0, "md5_proj": 1.0}
SEEDS = [0, 1, 2]
TASKS = ["mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb"]


@pytest.fixture(scope="module")
def base_config():
    return load_config(REPO / "params" / "smoke.yaml")  # read with the real root, before switching


@pytest.fixture
def config(base_config):
    config = copy.deepcopy(base_config)
    config["_matrix"] = {name: MATRIX[name] for name in ("ch2_hashformers", "ch2_subword", "ch2_related")}
    config["experiments"] = list(config["_matrix"])
    config["seeds"] = [0, 1]
    config["finetune"]["glue"]["tasks"] = TASKS
    config["finetune_variants"] = {"glue_ch2": {"epochs": 5, "seeds": SEEDS, "lr": 3.0e-5}}
    config["pretrain"]["shuffle_random"] = {**config["pretrain"]["mlm"], "shuffle_prob": 0.1, "random_prob": 0.1,
                                            "lr": 5.0e-5}
    config["pretrain"]["shuffle_random"].pop("mask_prob")
    config["pretrain_variants"] = {**config.get("pretrain_variants", {}), "mlm_ch2": {"lr": 1.0e-4}}
    config.pop("absent_runs", None)
    config["absent_runs"] = absent_runs(config)   # what load_config computes: CANINE-C needs the hub
    return config


def present_runs(config):
    return [r for r in runs(config) if r.run_id not in config["absent_runs"]]


def model_record(run) -> dict:
    fields = {k: v for k, v in run.model.items() if k not in ("pretrain_variant", "requires_hub", "objective")}
    return ModelConfig.from_dict({**fields, "vocab_size": VOCAB}).to_dict()


def write_results(root: Path, config: dict, skip=lambda run, task, seed: False, timing=True,
                  bench=lambda name: PT[name]) -> pd.DataFrame:
    """The tidy table, each run's pretrain.json / glue.json records under ``root``, and the pretraining speed
    record (rule pretraining_speed) timing each pretrained ch2_hashformers run at ``bench(name)`` ms/sample
    (``bench=None``: none)."""
    from leanlm.reporting.pretraining_speed import speed_path, speed_runs, speed_settings

    settings = speed_settings(config)
    path = speed_path("smoke")
    path.unlink(missing_ok=True)
    if bench is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        timed = {r.run_id: [bench(r.name)] * settings["rounds"] for r in present_runs(config)
                 if r.run_id in speed_runs(config)}
        path.write_text(json.dumps({"profile": "smoke", "settings": settings, "device": "CPU Bench-1, 1 threads",
                                    "ms_per_sample": timed}))
    rows = []
    for run in present_runs(config):
        model = model_record(run)
        results = []
        for index, task in enumerate(TASKS):
            spec = get_task(task)
            for seed in SEEDS:
                if skip(run, task, seed):
                    continue
                value = BASE[run.name] + 0.01 * seed + 0.002 * index
                rows.append({"profile": "smoke", "experiment": run.experiment, "run": run.name, "run_id": run.run_id,
                             "family": "glue", "backbone": "bert", "attention": "mha", "embedding": model["embedding"],
                             "layout": "uniform", "n_layers": 2, "n_decoder_layers": 0, "d_model": 64, "n_heads": 4,
                             "head_dim": 16, "task": task, "seed": seed, "metric": spec.primary_metric,
                             "value": value, "is_primary": True, "params_total": 1, "params_attention": 1,
                             "params_embedding": 1})
                results.append({"task": task, "seed": seed, "inference_examples": 100,
                                "inference_seconds": 100 * (1 + 0.1 * index) * INFER[run.name] / 1000})
        out = root / "results" / "smoke" / "runs" / run.run_id
        out.mkdir(parents=True, exist_ok=True)
        if run.objective != "none":
            pretrain = {"hardware": "CPU Test-9000, 1 threads", "model": model,
                        "timing": {"seconds": 1.0, "seconds_per_sample": PT[run.name] / 1000} if timing else {}}
            (out / "pretrain.json").write_text(json.dumps(pretrain))
        glue = {"hardware": "CPU Test-9000, 1 threads", "model": model, "results": results,
                "timing": {"inference_seconds_per_sample": 0.002}}
        (out / "glue.json").write_text(json.dumps(glue))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.to_csv(root / "results" / "smoke" / "all_runs.csv", index=False)
    return frame


def render(root, config, name, **kwargs):
    write_results(root, config, **kwargs)
    table = TABLES.get(name)("smoke", config, load("smoke"))
    tex_path, csv_path = write_table("smoke", name, table)
    tex = tex_path.read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and "smoke profile" in tex
    return tex, pd.read_csv(csv_path, keep_default_na=True)


def row_after(tex: str, heading: str, label: str, after: int = 0) -> list[str]:
    """Cells of row ``label`` below group heading ``heading`` (labels repeat across groups)."""
    lines = tex.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    i = next(i for i in range(start, len(lines)) if lines[i].split(" & ")[0] == label)
    return [c.removesuffix(" \\\\") for c in lines[i + after].split(" & ")[1:]]


def glue_avg(name: str) -> float:
    return 100 * (BASE[name] + 0.01 + 0.007)   # seeds 0..2 average 0.01; task indices 0..7 average 7e-3


# ----------------------------------------------------------------------------- Table 2.2 at the thesis's scale
def test_table_2_2_parameter_columns_equal_the_thesis(scratch_root):
    ANALYTIC.get("table_2_2_parameters")("paper")
    out = scratch_root / "paper_tables" / "paper"
    frame = pd.read_csv(out / "table_2_2_parameters.csv").set_index("label")
    expected = {"HashFormers-MD-Emb (50K)": ("124.6M", "38.6M"), "HashFormers-LSH-Emb (1K)": ("86.8M", "797.2K"),
                "HashFormers-MD-Pool": ("86.8M", "797.2K"), "HashFormers-LSH-Add": ("86.2M", "197.4K"),
                "HashFormers-MD-Proj": ("86.1M", "99.1K"), "BERT-MLM": ("124.6M", "38.6M"),
                "CANINE-C": ("121.0M", "12.3M"), "ProFormer": ("15.1M", "322.6K")}
    for label, (total, emb) in expected.items():
        assert (frame.loc[label, "total_printed"], frame.loc[label, "emb_printed"]) == (total, emb), label
    assert frame.loc["HashFormers-MD-Proj", "emb"] == 99_072 and frame.loc["HashFormers-LSH-Add", "emb"] == 197_376
    # Every printed count and ratio is reproduced, except PoEP of Emb (1K) / Pool (printed 1.0, counted 0.9).
    printed = frame.dropna(subset=["reported_total"])
    assert len(printed) == 12
    assert (printed["total_printed"] == printed["reported_total"]).all()
    assert (printed["emb_printed"] == printed["reported_emb"]).all()
    for metric in ("pcr_all", "pcr_emb", "poep"):
        differs = printed.index[(printed[metric] - printed[f"reported_{metric}"]).abs() > 1e-9].tolist()
        assert differs == ([] if metric != "poep" else
                           [f"HashFormers-{h}-{m}" for h in ("MD", "LSH") for m in ("Emb (1K)", "Pool")]), metric
    tex = (out / "table_2_2_parameters.tex").read_text()
    assert cells(tex, "Proj") == ["86.1M", "99.1K", "30.9", "99.7", "0.1"]
    assert cells(tex, "Pool") == ["86.8M", "797.2K", "30.3", "97.9", r"0.9$^{\mathrm{d}}$"]
    assert cells(tex, "Pool", 1)[-1] == r"\textit{1.0}"
    assert "PoEP: the thesis prints 1.0, the counts give 0.9 (797.2K / 86.8M = 0.92\\%)" in tex
    assert r"HashFormers-LSH (Ours)" in tex and "CanineForSequenceClassification" in tex


# ----------------------------------------------------------------------------- Table 2.1
def test_table_2_1_glue_per_task_and_average_beside_the_thesis(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_2_1")
    csv = csv.set_index("model")
    proj = csv.loc["HashFormers-MD-Proj"]
    assert proj["glue_avg_mean"] == pytest.approx(glue_avg("md5_proj"))
    assert proj["glue_avg_std"] == pytest.approx(1.0)              # 100 x 0.01 x std(0, 1, 2)
    assert proj["cola_mean"] == pytest.approx(100 * (BASE["md5_proj"] + 0.01 + 0.012))
    assert proj["n_seeds"] == 3 and proj["reported_cola"] == 45.9 and proj["token"] == "word"
    ours = row_after(tex, "HashFormers-MD (Ours)", "Proj")
    assert ours[0] == "word" and ours[-1] == f"{glue_avg('md5_proj'):.1f} (1.0)"
    assert row_after(tex, "HashFormers-MD (Ours)", "Proj", 1)[-1] == r"\textit{75.7 (0.3)}"
    assert cells(tex, "BERT-MLM")[-1] == rf"\textbf{{{glue_avg('bert_mlm'):.1f} (1.0)}}"   # best average
    assert cells(tex, "BERT-MLM", 1)[1] == r"\textit{\textbf{81.9}}"                        # thesis's best MNLI
    # CANINE-C is absent offline: its row says why, with the thesis's numbers beneath
    assert cells(tex, "CANINE-C$^{\\mathrm{a}}$")[:3] == ["Unicode", "-", "-"]
    assert cells(tex, "CANINE-C$^{\\mathrm{a}}$", 1)[-1] == r"\textit{70.4 (1.3)}"
    assert f"Not run in the smoke profile: {CANINE_ABSENT}" in tex
    assert csv.loc["CANINE-C", "absent"] == CANINE_ABSENT and math.isnan(csv.loc["CANINE-C", "glue_avg_mean"])
    assert "over 3 fine-tuning seeds" in tex


def test_missing_result_or_record_is_a_clear_error(scratch_root, config):
    with pytest.raises(LeanLMError, match=r"ch2_hashformers-lsh_add/glue.json lacks 1 task/seed.*rte seed 2"):
        render(scratch_root, config, "table_2_1", skip=lambda r, t, s: r.name == "lsh_add" and t == "rte" and s == 2)
    with pytest.raises(LeanLMError, match=r"no pretraining speed record.*rule pretraining_speed"):
        render(scratch_root, config, "table_2_3", bench=None)
    with pytest.raises(LeanLMError, match=r"no pretraining speed record.*rule pretraining_speed"):
        render(scratch_root, config, "table_2_side_by_side", bench=None)
    trimmed = {**config, "_matrix": {k: v for k, v in config["_matrix"].items() if k != "ch2_subword"}}
    write_results(scratch_root, config)
    with pytest.raises(LeanLMError, match="table_2_6 needs experiment 'ch2_subword'.*key experiments"):
        TABLES.get("table_2_6")("smoke", trimmed, load("smoke"))


# ----------------------------------------------------------------------------- Table 2.2 from runs
def test_table_2_2_retention_and_counts_of_the_profiles_models(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_2_2")
    csv = csv.set_index("model")
    pool = csv.loc["HashFormers-LSH-Pool"]
    assert pool["prr_cola"] == pytest.approx(100 * (BASE["lsh_pool"] + 0.022) / (BASE["bert_mlm"] + 0.022))
    assert pool["prr_glue_avg"] == pytest.approx(100 * glue_avg("lsh_pool") / glue_avg("bert_mlm"))
    d = 64
    # Appendix 2.8 at d=64: Proj T x d, Add 2 T d, Pool (13 + 2^10) d, each + the regular-token vector.
    assert csv.loc["HashFormers-MD-Proj", "emb"] == 128 * d + d
    assert csv.loc["HashFormers-LSH-Add", "emb"] == 2 * 128 * d + d
    assert pool["emb"] == (13 + 1024) * d + d
    assert csv.loc["BERT-MLM", "emb"] == VOCAB * d and csv.loc["ProFormer", "emb"] == 420 * d
    mlm_total = csv.loc["BERT-MLM", "total"]
    assert pool["pcr_all"] == pytest.approx(100 * (1 - pool["total"] / mlm_total))
    assert pool["poep"] == pytest.approx(100 * pool["emb"] / pool["total"])
    assert pool["reported_pcr_emb"] == 97.9 and pool["reported_emb"] == "797.2K"
    assert plain(row_after(tex, "HashFormers-MD (Ours)", "Proj")[-4]) == "8.3K"
    assert plain(plain(row_after(tex, "HashFormers-MD (Ours)", "Proj", 1)[-4])) == "99.1K"
    assert tex.startswith(r"\begin{landscape}") and r"table\_2\_2\_parameters gives them at BERT-base" in tex


# ----------------------------------------------------------------------------- Table 2.3
def test_table_2_3_times_speed_ups_and_hardware(scratch_root, config):
    """PT from the speed record (half the training clock's times here), never from pretrain.json."""
    tex, csv = render(scratch_root, config, "table_2_3", bench=lambda name: PT[name] / 2)
    csv = csv.set_index("model")
    proj = csv.loc["HashFormers-MD-Proj"]
    assert proj["pt_ms"] == pytest.approx(2.5) and proj["pt_speedup"] == pytest.approx(5.0)
    assert proj["infer_ms_min"] == pytest.approx(1.0) and proj["infer_ms_max"] == pytest.approx(1.7)
    assert proj["infer_speedup_min"] == pytest.approx(4.0) and proj["infer_speedup_max"] == pytest.approx(4.0)
    assert cells(tex, "HashFormers-MD-Proj") == [r"\textbf{2.5}", r"\textbf{5.0x}", r"\textbf{1.0–1.7}",
                                                 r"\textbf{4.0x}"]
    assert cells(tex, "HashFormers-MD-Proj", 1) == [r"\textit{10.6}", r"\textit{2.4x}", r"\textit{1.8–4.6}",
                                                    r"\textit{1.0x–2.6x}"]
    assert cells(tex, "BERT-MLM")[:2] == ["12.5", "1.0x"]
    assert "ProFormer" not in csv.index                                  # the thesis has no ProFormer row
    assert "Pretraining timed on CPU Bench-1, 1 threads; inference timed on CPU Test-9000" in tex
    assert "interleaved rounds" in tex and "head over every position" in tex
    assert cells(tex, "CANINE-C$^{\\mathrm{a}}$") == ["-"] * 4


# ----------------------------------------------------------------------------- Table 2.6
def test_table_2_6_subword_beside_word(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_2_6")
    assert csv["run_id"].tolist() == [f"ch2_{e}-{n}" for n in ("md5_emb_50k", "md5_proj", "lsh_emb_50k", "lsh_proj")
                                      for e in ("subword", "hashformers")]
    assert csv["token"].tolist() == ["subword", "word"] * 4
    assert csv["reported_glue_avg"].tolist() == [78.5, 79.9, 74.1, 75.7, 66.0, 76.0, 78.3, 79.1]
    assert row_after(tex, "HashFormers-LSH (Ours)", "Proj", 1)[0] == r"\textit{subword}"


# ----------------------------------------------------------------------------- side by side
def test_side_by_side_every_hash_family_on_one_backbone(scratch_root, config):
    tex, csv = render(scratch_root, config, "table_2_side_by_side", bench=lambda name: PT[name] / 2)
    csv = csv.set_index("model")
    assert list(csv.index[:2]) == ["BERT-MLM", "CANINE-C"] and csv.index[-1] == "EELBERT"
    assert csv.loc["BERT-Hash nano", "emb"] == VOCAB * 16 + 16 * 64
    assert csv.loc["EELBERT", "emb"] == 0
    assert csv.loc["HashFormers-MD-Proj", "infer_speedup"] == pytest.approx(4.0)
    assert csv.loc["BERT-Hash pico", "prr_glue_avg"] == pytest.approx(
        100 * glue_avg("bert_hash_pico") / glue_avg("bert_mlm"))
    assert (csv.dropna(subset=["emb"])["backbone"] == "2x64x4x256").all()
    assert "NeuML's model card reports 0.969M parameters at its own size" in tex and "MNLI-m 65.65" in tex
    assert row_after(tex, "HashFormers-MD (Ours)", "Proj", 1)[0] == r"\textit{99.1K}"
    assert row_after(tex, "HashFormers-MD (Ours)", "Proj")[2:5] == [r"\textbf{2.5}", r"\textbf{1.4}", r"\textbf{4.0x}"]
    assert cells(tex, "EELBERT$^{\\mathrm{e}}$")[0] == r"\textbf{0}"
    assert "Related hash embeddings" in tex and r"\quad" not in tex.split("Related hash embeddings")[1]


def test_side_by_side_pt_is_the_speed_record_not_the_training_clock(scratch_root, config):
    """PT from the pretraining speed record (Table 2.3's: one batch, interleaved rounds, the median over
    rounds), never pretrain.json's clock (absent here); a run the record does not time has an empty cell
    whose note says why."""
    from leanlm.reporting.pretraining_speed import speed_path

    write_results(scratch_root, config, timing=False)
    record = json.loads(speed_path("smoke").read_text())
    rounds = [3.0, 1.0, 2.0, 9.0, 4.0, 3.0, 3.0, 8.0, 2.0, 1.0]   # median 3.0 (mean 3.6)
    record["ms_per_sample"] = {run: rounds[: len(times)] for run, times in record["ms_per_sample"].items()}
    assert len(rounds) >= len(next(iter(record["ms_per_sample"].values())))
    speed_path("smoke").write_text(json.dumps(record))
    table = TABLES.get("table_2_side_by_side")("smoke", config, load("smoke"))
    frame = table.frame.set_index("model")
    median = float(pd.Series(rounds[: len(next(iter(record["ms_per_sample"].values())))]).median())
    for model in ("BERT-MLM", "HashFormers-MD-Proj", "HashFormers-LSH-Emb (1K)"):
        assert frame.loc[model, "pt_ms"] == pytest.approx(median), model
    # BERT-Hash and EELBERT (ch2_related) are not in the record: empty, with why
    for model in ("BERT-Hash nano", "EELBERT"):
        assert math.isnan(frame.loc[model, "pt_ms"]), model
    tex = write_table("smoke", "table_2_side_by_side", table)[0].read_text()
    untimed = cells(tex, "EELBERT$^{\\mathrm{e}}$")[2]
    assert untimed.startswith("-$^{") and cells(tex, "BERT-Hash nano$^{\\mathrm{d}}$")[2] == untimed
    assert "Not timed by the pretraining speed record, which times ch2\\_hashformers" in tex
    assert cells(tex, "CANINE-C$^{\\mathrm{a}}$")[2] == "-"   # absent offline: its label's note says why
    # CANINE-C where the hub is reachable: the hub's checkpoint, never pretrained here
    canine = next(r for r in runs({**config, "absent_runs": {}}) if r.name == "canine_c")
    assert untimed_reason(canine).startswith("Not pretrained by the pipeline")
    assert "interleaved rounds" in tex and "median over rounds" in tex and "not the training clock" in tex
    assert "Pretraining timed on CPU Bench-1, 1 threads" in tex


def test_tables_reading_the_speed_record_declare_it():
    """The rule rendering a table waits for the speed record where tables.yaml says `reads: [speed]`."""
    specs = yaml.safe_load((REPO / "params" / "tables.yaml").read_text())
    assert {name for name, spec in specs.items() if "speed" in spec.get("reads", [])} == {
        "table_2_3", "table_2_side_by_side"}


# ----------------------------------------------------------------------------- Tables 2.4 and 2.5
def test_tables_2_4_and_2_5_from_the_profile(scratch_root, config):
    t24 = PARAMS_TABLES.get("table_2_4")("smoke", config)
    frame = t24.frame.set_index("row")
    assert [c for c in frame.columns if not c.endswith("_setting")] == ["reported_row", "shuffle_random",
                                                                         "mlm_mlm_ch2", "reported"]
    assert t24.context["headers"][:2] == ["S+R (BERT-S+R, HashFormers)", "MLM (BERT-MLM, BERT-Hash, EELBERT)"]
    assert frame.loc["Peak learning rate", "shuffle_random"] == "5e-5"
    assert frame.loc["Peak learning rate", "mlm_mlm_ch2"] == "1e-4"
    assert frame.loc["Peak learning rate", "reported"] == "1e-4 for MLM, 5e-5 for others"
    assert frame.loc["Shuffled token fraction", "shuffle_random"] == "0.1"
    t25 = PARAMS_TABLES.get("table_2_5")("smoke", config)
    frame = t25.frame.set_index("row")
    assert frame.loc["Maximum train epochs", "glue"] == "5 epochs"
    assert frame.loc["Fine-tuning seeds", "glue"] == "0, 1, 2"
    assert frame.loc["Peak learning rate", "glue_setting"] == "finetune.glue + finetune_variants.glue_ch2.lr"
    assert frame.loc["Learning rate schedule", "reported"] == "cosine with hard restarts"
    # Ch. 2 prints no early stopping: a profile that stops early is told a deviation; the profiles turn it off.
    assert frame.loc["Early stopping patience", "glue"] == "2"
    assert "this profile stops after 2 evaluations without improvement" in t25.context["caption"]
    for profile in ("smoke", "paper"):  # the shipped profiles, as written (the scratch root is current here)
        real = yaml.safe_load((REPO / "params" / f"{profile}.yaml").read_text())
        assert real["finetune_variants"]["glue_ch2"]["early_stopping_patience"] is None
    off = copy.deepcopy(config)
    off["finetune_variants"]["glue_ch2"]["early_stopping_patience"] = None
    t25_off = PARAMS_TABLES.get("table_2_5")("smoke", off)
    assert t25_off.frame.set_index("row").loc["Early stopping patience", "glue"] == "-"
    assert "prints no early stopping for chapter 2, and the runs train every epoch" in t25_off.context["caption"]
    tex, _ = write_table("smoke", "table_2_5", t25)
    assert "Table 2.5" in tex.read_text()
