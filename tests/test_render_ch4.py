"""Chapter 4's tables and figures from synthetic records (a hand-built ch. 4 matrix, tidy lm-eval rows,
analysis.json and pretrain.json files), the analytic Tables 4.5-4.8 and 4.10, and the params tables.

Synthetic scores are chosen to be checked by hand: a run's accuracy on every NLU task is
ACC[variant] + BONUS[configuration] (a fraction), its standard error 0.01; WikiText word perplexity
is PPL[variant] x PPL_FACTOR[configuration]; LAMBADA perplexity is twice that.
"""

from __future__ import annotations

import json
import math
import shutil
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from leanlm.errors import LeanLMError
from leanlm.evaluation.indicators import INDICATORS, attention_indicators, logit_histogram
from leanlm.reporting.aggregate import COLUMNS

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ["mlp", "approximate", "non_approximate", "rnd_emb_qk", "fixed_seq_qk", "static_emb_qk"]
ACC = {"standard": 0.60, "mlp": 0.30, "approximate": 0.55, "non_approximate": 0.28, "rnd_emb_qk": 0.50,
       "fixed_seq_qk": 0.52, "static_emb_qk": 0.51}
PPL = {"standard": 40.0, "mlp": 900.0, "approximate": 48.0, "non_approximate": 2.5e5, "rnd_emb_qk": 85.0,
       "fixed_seq_qk": 79.0, "static_emb_qk": 80.0}
BONUS = {"uniform": 0.0, "hybrid": 0.05, "skip": -0.2}
PPL_FACTOR = {"uniform": 1.0, "hybrid": 0.5, "skip": 100.0}
# Stand-ins (leanlm_*) and params/tasks/lm_eval.yaml names (lm_eval_*) both map to the thesis's tasks.
TASKS = {"leanlm_definition": "mc", "lm_eval_sciq": "mc", "leanlm_next_sentence_2way": "mc",
         "leanlm_wikitext": "rolling", "lm_eval_lambada_openai": "last_word"}
N_LAYERS = 4
LENGTHS = [16, 32]
MODEL = {"backbone": "qwen", "n_layers": N_LAYERS, "d_model": 32, "n_heads": 2, "head_dim": 16, "d_ff": 64,
         "max_position": 64}


def _runs(names, **defaults):
    return {n: {"attention": n, **defaults} for n in names}


def ch4_config() -> dict:
    """A profile dict with every ch. 4 experiment (as load_config resolves it)."""
    layouts = {f"{v}_{'pct25' if l == '25%' else l}": {"attention": v, "layout": l}
               for v in ("rnd_emb_qk", "non_approximate")
               for l in ("even", "odd", "top", "middle", "bottom", "25%", "first", "last", "bilateral")}
    sizes = {f"{s}_{v}": {"attention": v, "size": f"qwen_{s}", "layout": layout}
             for s in ("70m", "160m") for v, layout in
             (("standard", "uniform"), ("mlp", "uniform"), ("non_approximate", "hybrid"))}
    sizes["500m_mlp"] = {"attention": "mlp", "size": "qwen_small", "evaluate_from": "ch4_uniform-mlp"}
    appendix = {"standard": {"attention": "standard"},
                **{f"uni_{v}": {"attention": v} for v in ("non_approximate", "rnd_emb_qk")},
                **{f"hyb_{v}": {"attention": v, "layout": "hybrid"} for v in ("non_approximate", "rnd_emb_qk")}}

    def experiment(runs, size="qwen_small", **extra):
        return {"chapter": 4, "title": "t", "backbone": "qwen", "objective": "causal_lm", "size": size,
                "finetune": ["lm_eval", "analysis"], "runs": runs, **extra}

    matrix = {
        "ch4_uniform": experiment({"standard": {"attention": "standard"}, **_runs(VARIANTS)}),
        "ch4_hybrid": experiment(_runs(VARIANTS, layout="hybrid")),
        "ch4_skip": experiment({v: {"attention": v, "layout": "hybrid", "evaluate_from": f"ch4_hybrid-{v}",
                                    "skip_simple_layers": True} for v in VARIANTS}),
        "ch4_1_7b": experiment(appendix, size="qwen_1_7b"),
        "ch4_gqa": experiment({k: {**v, "n_kv_heads": 1} for k, v in appendix.items()}),
        "ch4_layouts": experiment(layouts),
        "ch4_sizes": experiment(sizes),
    }
    models = {"qwen_small": MODEL, "qwen_1_7b": {**MODEL, "qk_norm": True},
              "qwen_70m": {**MODEL, "n_layers": 2}, "qwen_160m": {**MODEL, "n_layers": 3}}
    return {
        "profile": "smoke", "source": "packaged", "seeds": [0], "experiments": list(matrix), "models": models,
        "pretrain": {"causal_lm": {"steps": 100, "batch_size": 4, "grad_accum": 2, "seq_len": 64, "lr": 4e-4,
                                   "schedule": "cosine", "warmup_steps": 10, "weight_decay": 0.1,
                                   "adam_betas": [0.9, 0.9999], "adam_eps": 1e-8, "clip_norm": 1.0}},
        "finetune": {"lm_eval": {"tasks": list(TASKS), "batch_size": 4},
                     "analysis": {"tasks": ["attention_analysis"], "batch_size": 4, "context_lengths": LENGTHS}},
        "_matrix": matrix, "_params_file": "params/smoke.yaml",
    }


def _config_of(run) -> str:
    from leanlm.reporting.ch4.records import configuration

    c = configuration(run)
    return c if c in ("uniform", "hybrid", "skip") else "uniform"


def tidy_frame(config) -> pd.DataFrame:
    from leanlm.runs import runs

    rows = []
    for run in runs(config):
        c = _config_of(run)
        acc, ppl = ACC[run.attention] + BONUS[c], PPL[run.attention] * PPL_FACTOR[c]
        for task, kind in TASKS.items():
            metrics = ({"acc": acc, "acc_stderr": 0.01, "acc_norm": acc} if kind == "mc" else
                       {"word_perplexity": ppl} if kind == "rolling" else
                       {"perplexity": 2 * ppl, "acc": acc / 2, "acc_stderr": 0.01})
            for metric, value in metrics.items():
                rows.append({"profile": "smoke", "experiment": run.experiment, "run": run.name, "run_id": run.run_id,
                             "family": "lm_eval", "backbone": "qwen", "attention": run.attention,
                             "embedding": "standard", "layout": run.model.get("layout", "uniform"),
                             "n_layers": run.model["n_layers"], "n_decoder_layers": 0,
                             "d_model": run.model["d_model"], "n_heads": 2, "head_dim": 16, "task": task, "seed": 0,
                             "metric": metric, "value": value, "is_primary": metric in ("acc", "word_perplexity"),
                             "params_total": 1000, "params_attention": 100, "params_embedding": 10})
    return pd.DataFrame(rows, columns=COLUMNS)


@lru_cache(maxsize=None)
def _layer(scale: float, layer: int) -> tuple[dict, dict]:
    """Indicators and |logit| histogram of one random causal attention layer, as attention_profile
    computes them (the real functions, tiny maps)."""
    from leanlm.evaluation.attention_analysis import LOGIT_EDGES

    torch.manual_seed(layer)
    scores = torch.randn(1, 2, 8, 8) * scale
    probs = scores.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    hist = logit_histogram(scores, bins=LOGIT_EDGES, magnitude=True)
    signed = logit_histogram(scores, bins=1)
    summary = {k: signed[k] for k in ("n", "min", "max", "abs_max", "mean", "std")}
    return ({k: v.tolist() for k, v in attention_indicators(probs).items()},
            {"counts": hist["counts"], "above": hist["above"], **summary})


def analysis_record(run, seed: int) -> dict:
    """analysis.json as leanlm.runners.analysis writes it (a results JSON; details in results[0])."""
    from leanlm.evaluation.attention_analysis import LOGIT_EDGES
    from leanlm.modeling.layouts import SIMPLE, layer_kinds

    layers, hists = [], []
    scale = 1000.0 if run.attention == "non_approximate" and _config_of(run) == "uniform" else 5.0
    kinds = layer_kinds(run.model.get("layout", "uniform"), run.model["n_layers"])
    for layer, kind in enumerate(kinds, start=1):
        if run.attention == "mlp" and kind == SIMPLE:   # no attention map
            layers.append({"layer": layer, "kind": kind, "per_head": None, "mean": None})
            continue
        values, hist = _layer(scale, layer)
        mean = {k: float(torch.tensor(v, dtype=torch.float).mean()) for k, v in values.items()}
        mean["ENTROPY"] += 0.01 * seed   # runs differ
        layers.append({"layer": layer, "kind": kind, "per_head": values, "mean": mean})
        hists.append({"layer": layer, **hist})
    ppl = PPL[run.attention] * PPL_FACTOR[_config_of(run)]
    by_length = {n: ppl * 64 / n for n in LENGTHS}
    return {"run_id": run.run_id, "family": "analysis", "results": [{
        "task": "attention_analysis", "seed": 0, "primary_metric": "perplexity",
        "metrics": {"perplexity": ppl, **{f"perplexity_ctx{n}": v for n, v in by_length.items()}},
        "context_length_perplexity": {"lengths": LENGTHS, "perplexity": {str(n): v for n, v in by_length.items()}},
        "attention": {"indicators": {"layers": layers, "normalised": []},
                      "logits": {"magnitude": True, "edges": LOGIT_EDGES, "layers": hists}}}]}


def write_records(root: Path, config: dict) -> None:
    """all_runs.csv, analysis.json / pretrain.json of every trained run, and the baselines, under root."""
    from leanlm.runs import runs

    results = root / "results" / "smoke"
    results.mkdir(parents=True)
    tidy_frame(config).to_csv(results / "all_runs.csv", index=False)
    for i, run in enumerate(runs(config)):
        folder = results / "runs" / run.run_id
        folder.mkdir(parents=True)
        if run.evaluate_from:
            continue
        (folder / "analysis.json").write_text(json.dumps(analysis_record(run, i)))
        history = [{"step": s, "loss": 10.0 / s + ACC[run.attention], "lr": 1e-4} for s in range(1, 6)]
        (folder / "pretrain.json").write_text(json.dumps({"history": history + [{"step": 5, "eval": {}}]}))
    baselines = {"leanlm_definition": {"random_guess": {"acc": 0.25}, "majority": {"acc": 0.3}},
                 "lm_eval_sciq": {"random_guess": {"acc": 0.25}, "majority": {"acc": 0.25}},
                 "leanlm_next_sentence_2way": {"random_guess": {"acc": 0.5}, "majority": {"acc": 0.56}},
                 "leanlm_wikitext": {"random_guess": {"word_perplexity": 3e5}, "majority": None},
                 "lm_eval_lambada_openai": {"random_guess": {"perplexity": 3e6, "acc": 0.0}, "majority": None}}
    (results / "baselines").mkdir()
    (results / "baselines" / "lm_eval.json").write_text(json.dumps({"tasks": baselines}))
    for experiment in config["experiments"]:  # and each experiment's, which its tables read
        (results / "baselines" / experiment).mkdir()
        (results / "baselines" / experiment / "lm_eval.json").write_text(json.dumps({"tasks": baselines}))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("ch4_records")
    write_records(root, ch4_config())
    return root


@pytest.fixture
def project(scratch_root, records):
    """Scratch root holding the synthetic records (a copy: tests may delete or edit them)."""
    shutil.copytree(records / "results", scratch_root / "results")
    return scratch_root, ch4_config()


@pytest.fixture(scope="module")
def rendered(records, tmp_path_factory):
    """Every chapter 4 results table and figure, rendered once from the synthetic records."""
    from leanlm.config import _load_matrix_cached

    root = tmp_path_factory.mktemp("ch4_root")
    shutil.copytree(REPO / "params", root / "params")
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)
    shutil.copytree(records / "results", root / "results")
    config = ch4_config()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        _load_matrix_cached.cache_clear()
        out = {name: render(config, name) for name in [f"table_4_{i}" for i in range(1, 5)]
               + [f"figure_4_{i}" for i in range(1, 9)]}
    _load_matrix_cached.cache_clear()
    return out


def figure_data(rendered, name) -> pd.DataFrame:
    return pd.read_csv(next(p for p in rendered[name] if p.suffix == ".csv"))


def render(config, name):
    from leanlm.reporting.aggregate import load
    from leanlm.reporting.render import TABLES, Table, write_table

    built = TABLES.get(name)("smoke", config, load("smoke"))
    if isinstance(built, Table):
        tex, csv = write_table("smoke", name, built)
        return tex.read_text(), pd.read_csv(csv)
    return built


def cells(tex: str, label: str, after: int = 0) -> list[str]:
    lines = tex.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split(" & ")[0].startswith(label + " ")
             or line.split(" & ")[0] == label)
    return [c.removesuffix(" \\\\") for c in lines[i + after].split(" & ")[1:]]


# --------------------------------------------------------------------------- Tables 4.1-4.4
def test_table_4_1_rows_scores_and_thesis_rows(rendered):
    tex, csv = rendered["table_4_1"]
    csv = csv.set_index("row")
    assert list(csv.index[:3]) == ["Rnd. Guess", "Majority", "Standard"]
    assert list(csv.index[3:9]) == ["UNIFORM MLP", "UNIFORM Approx.", "UNIFORM Non-apx.", "UNIFORM RndEmbQK",
                                    "UNIFORM FixedSeqQK", "UNIFORM StaticEmbQK"]
    assert csv.index[-1] == "HYBRID SKIP StaticEmbQK" and len(csv) == 3 + 18
    # arc_easy <- leanlm_definition, sciq <- lm_eval_sciq, copa <- leanlm_next_sentence_2way
    hyb = csv.loc["HYBRID Non-apx."]
    assert hyb["arc_easy"] == pytest.approx(100 * (0.28 + 0.05)) and hyb["sciq_std"] == pytest.approx(1.0)
    assert hyb["avg_acc"] == pytest.approx(33.0) and math.isnan(hyb["boolq"])
    assert hyb["wikitext_ppl"] == pytest.approx(1.25e5) and hyb["lambada_openai_ppl"] == pytest.approx(2.5e5)
    assert csv.loc["Standard", "reported_arc_easy"] == 41.5
    assert csv.loc["UNIFORM Non-apx.", "reported_wikitext_ppl"] == 9e4
    assert csv.loc["Rnd. Guess", "copa"] == pytest.approx(50.0)
    assert csv.loc["Majority", "arc_easy"] == pytest.approx(30.0)
    # LaTeX: standard errors as subscripts, 1E+5-style perplexities, best model in bold, thesis row below
    assert cells(tex, "Standard")[0] == r"\textbf{60.0$_{1.0}$}"
    assert cells(tex, "UNIFORM Non-apx.")[8] == "3E+5" and cells(tex, "UNIFORM Non-apx.", 1)[8] == r"\textit{9E+4}"
    assert cells(tex, "Standard")[1] == "-"             # BoolQ: not evaluated by this profile
    assert cells(tex, "Majority")[8] == "-"
    assert "Not evaluated by this profile" in tex and "ARC-E = leanlm\\_definition" in tex
    assert "not comparable in magnitude" in tex and tex.startswith(r"\begin{landscape}")


def test_appendix_tables_and_errors(rendered, project):
    root, config = project
    tex, csv = rendered["table_4_2"]
    assert list(csv["row"]) == ["Rnd. Guess", "Majority", "Standard", "UNI. Non-apx.", "UNI. RndEmbQK",
                                "HYB. Non-apx.", "HYB. RndEmbQK"]
    assert csv.set_index("row").loc["HYB. RndEmbQK", "reported_avg_acc"] == 55.0
    _, gqa = rendered["table_4_3"]
    assert gqa.set_index("row").loc["UNI. RndEmbQK", "reported_lambada_openai_acc"] == 12.4
    tidy = pd.read_csv(root / "results" / "smoke" / "all_runs.csv")
    tidy[tidy["run_id"] != "ch4_hybrid-mlp"].to_csv(root / "results" / "smoke" / "all_runs.csv", index=False)
    with pytest.raises(LeanLMError, match=r"ch4_hybrid-mlp on lm_eval.*ch4_hybrid-mlp/lm_eval.json is missing"):
        render(config, "table_4_1")
    with pytest.raises(LeanLMError, match="table_4_2 needs experiment 'ch4_1_7b'"):
        render({**config, "_matrix": {k: v for k, v in config["_matrix"].items() if k != "ch4_1_7b"}}, "table_4_2")


def test_table_4_4_context_lengths(rendered):
    tex, csv = rendered["table_4_4"]
    csv = csv.set_index("row")
    assert "HYBRID SKIP MLP" not in csv.index and len(csv) == 13
    assert csv.loc["UNIFORM Approx.", "len_16"] == pytest.approx(48.0 * 4)
    assert math.isnan(csv.loc["Standard", "len_128"])
    assert csv.loc["HYBRID Approx.", "reported_len_2048"] == 39.4
    assert cells(tex, "Standard")[:3] == ["160.0", "80.0", "-"]         # L = 16, 32; the thesis's 128: not run
    assert cells(tex, "HYBRID Approx.")[:2] == [r"\textbf{96.0}", r"\textbf{48.0}"]   # lowest per length


def test_baselines_from_local_task_files(project):
    """Without baselines/<experiment>/lm_eval.json, the rows come from the stand-ins' own data (data/<p>/tasks/lm_eval/)."""
    from leanlm.reporting.ch4.records import baseline_scores

    root, config = project
    for path in (root / "results" / "smoke" / "baselines").rglob("lm_eval.json"):
        path.unlink()
    folder = root / "data" / "smoke" / "tasks" / "lm_eval"
    folder.mkdir(parents=True)
    rows = [{"query": "q", "choices": ["a", "b", "c", "d"], "label": label} for label in (0, 0, 1, 3)]
    (folder / "leanlm_definition.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"task": "leanlm_definition", "output_type": "multiple_choice",
            "dataset_kwargs": {"data_files": {"test": str(folder / "leanlm_definition.jsonl")}}}
    (folder / "leanlm_definition.yaml").write_text(yaml.safe_dump(spec))
    scores = baseline_scores("smoke", config)
    assert scores["Rnd. Guess"]["arc_easy"] == pytest.approx(25.0) and scores["Majority"]["arc_easy"] == 50.0
    assert math.isnan(scores["Rnd. Guess"]["sciq"])   # no local file for it: '-' with a note
    tex, _ = render(config, "table_4_1")
    assert "Not computed for this profile's tasks" in tex


# --------------------------------------------------------------------------- figures
@pytest.mark.parametrize("name", [f"figure_4_{i}" for i in range(1, 9)])
def test_figures_write_pdf_png_and_plotted_data(rendered, name):
    paths = rendered[name]
    assert sorted(p.suffix for p in paths) == [".csv", ".pdf", ".png"]
    assert all(p.stat().st_size > 0 for p in paths) and all(p.stem == name for p in paths)
    assert not figure_data(rendered, name).empty


def test_indicator_and_logit_figure_data(rendered):
    data = figure_data(rendered, "figure_4_1")
    assert set(data["indicator"]) == set(INDICATORS) and "mlp" not in set(data["variant"])
    assert set(data["config"]) == {"standard", "uniform", "hybrid"}
    shown = data.set_index("indicator")["shown"]
    assert shown.loc["ENTROPY"].min() == 0.0 and shown.loc["ENTROPY"].max() == 1.0   # min-max normalised
    raw = data[data["indicator"] == "LOCFOC_1"]
    assert (raw["shown"] == 2 * raw["value"]).all()                                   # doubled for visibility
    logits = figure_data(rendered, "figure_4_2")
    assert set(logits["layer"]) == {1, 3}      # the hybrid's simple (odd) layers
    uniform = logits[(logits["variant"] == "non_approximate") & (logits["config"] == "uniform")]
    hybrid = logits[(logits["variant"] == "non_approximate") & (logits["config"] == "hybrid")]
    assert uniform["abs_max"].min() > 100 > 20 > hybrid["abs_max"].max()
    assert (uniform["q05"] <= uniform["median"]).all() and (uniform["median"] <= uniform["q95"]).all()


def test_layout_and_size_figure_data(rendered):
    layouts = figure_data(rendered, "figure_4_3")
    assert set(layouts["layout"]) == {"even", "odd", "top", "middle", "bottom", "25%", "first", "last", "bilateral"}
    wiki = layouts[layouts["metric"] == "wikitext_ppl"]
    assert (wiki["standard"] == 40.0).all()
    sizes = figure_data(rendered, "figure_4_4")
    assert list(dict.fromkeys(sizes["size"])) == ["70M", "160M", "500M"]
    assert set(sizes["metric"]) == {"wikitext_ppl", "arc_easy", "sciq"}
    losses = figure_data(rendered, "figure_4_5")
    assert len(losses) == 7 * 5   # seven runs of five loss records (the evaluation entry left out)
    # the 500M point evaluates ch4_uniform-mlp's model: its curve is that run's training
    assert set(losses.loc[losses["size"] == "500M", "run_id"]) == {"ch4_sizes-500m_mlp"}


def test_read_analysis_of_a_real_attention_profile(scratch_root):
    """The reader against the producer: attention_profile of a tiny hybrid model, as ch4_analysis stores it."""
    from leanlm.evaluation.attention_analysis import LOGIT_EDGES, attention_profile
    from leanlm.modeling.models import build_model
    from leanlm.modeling.qwen_sizes import qwen_config
    from leanlm.reporting.ch4.records import read_analysis

    config = qwen_config("70M", "mlp", "hybrid", vocab_size=64, n_layers=4, d_model=32, n_heads=2, head_dim=16,
                         n_kv_heads=2, d_ff=64, max_position=32)
    torch.manual_seed(0)
    profile = attention_profile(build_model(config, "causal_lm"), torch.randint(0, 64, (2, 16)))
    folder = scratch_root / "results" / "smoke" / "runs" / "x-mlp"
    folder.mkdir(parents=True)
    record = {"results": [{"task": "attention_analysis", "seed": 0, "metrics": {"perplexity_ctx16": 9.0},
                           "context_length_perplexity": {"perplexity": {"32": 7.0}}, "attention": profile}]}
    (folder / "analysis.json").write_text(json.dumps(record))
    analysis = read_analysis("smoke", "x-mlp")
    assert list(analysis.indicators.index) == [2, 4]            # the MLP (odd) layers mix no tokens
    assert list(analysis.indicators.columns) == list(INDICATORS) and analysis.indicators.notna().all().all()
    assert analysis.kinds == {1: "simple", 2: "standard", 3: "simple", 4: "standard"}
    assert sorted(analysis.logits) == [2, 4] and analysis.logits[2]["edges"] == LOGIT_EDGES
    assert analysis.context_ppl == {32: 7.0, 16: 9.0}


def test_missing_analysis_is_a_clear_error(project):
    root, config = project
    (root / "results" / "smoke" / "runs" / "ch4_uniform-approximate" / "analysis.json").unlink()
    with pytest.raises(LeanLMError, match="ch4_uniform-approximate/analysis.json does not exist"):
        render(config, "figure_4_7")


# --------------------------------------------------------------------------- analytic and params tables
def test_table_4_10_counts_equal_across_variants_within_tolerance():
    from leanlm.modeling.qwen_sizes import MLP_TOLERANCE_PER_LAYER
    from leanlm.reporting.ch4.analytic import check_counts, table_4_10_frame

    frame = table_4_10_frame().set_index("size")
    assert list(frame.index) == ["70M", "160M", "500M", "1.7B"]
    for size, row in frame.iterrows():
        assert row["config_hidden_size"] == row["reported_hidden_size"]
        assert row["config_num_of_key_value_heads"] == row["reported_num_of_key_value_heads"]
        exact = [row[c] for c in frame.columns if c.startswith("params_") and c != "params_mlp"]
        assert len(set(exact)) == 1, size      # every projected variant: Standard's count exactly
        allowed = MLP_TOLERANCE_PER_LAYER * row["hidden"] * row["layers"]
        assert abs(row["params_mlp"] - row["params_standard"]) <= allowed, size
    broken = table_4_10_frame().assign(params_approximate=lambda f: f["params_standard"] + 1)
    with pytest.raises(LeanLMError, match=r"Table 4\.10.*70M approximate: .* differs from Standard by 1 \(allowed 0\)"):
        check_counts(broken)


def test_formula_tables_render(scratch_root):
    from leanlm.reporting.ch4.analytic import formula_table

    size = {"B": 1, "L": 16, "d": 32, "h": 2}
    tex_path, csv_path = formula_table("smoke", "table_4_8", size)
    tex, csv = tex_path.read_text(), pd.read_csv(csv_path).set_index("variant")
    assert csv.loc["standard", "measured"] == csv.loc["standard", "formula_value"] == 4 * 16 * 32
    assert r"$2(B + 1)Ld$" in tex and "Approx. (appendix)" in tex
    tex6 = formula_table("smoke", "table_4_6", size)[0].read_text()
    assert r"\multicolumn{4}{c}{Prefill}" in tex6 and r"$4BL^2d + 6BLd^2$" in tex6


def test_params_tables_4_9_and_4_11(scratch_root):
    from leanlm.reporting.render import PARAMS_TABLES, write_table

    config = ch4_config()
    config["models"]["qwen_1_7b"]["pretrain_overrides"] = {"lr": 3e-4}
    table = PARAMS_TABLES.get("table_4_9")("smoke", config)
    frame = table.frame.set_index("row")
    columns = [c for c in frame.columns if not c.endswith("_setting") and c not in ("reported_row", "reported")]
    assert len(columns) == 2                                    # the 1.7B's own learning rate: its own column
    assert frame.loc["Peak learning rate", columns].tolist() == ["4e-4", "3e-4"]
    assert frame.loc["Number of cycles in scheduler", "reported"] == "0.5"
    assert frame.loc["Tokens per step", columns[0]] == "512"
    write_table("smoke", "table_4_9", table)
    t411 = PARAMS_TABLES.get("table_4_11")("smoke", config)
    rows = t411.frame.set_index("layout")
    assert rows["matches"].all() and rows.loc["bottom", "standard_layer_ids"] == "{13,14,15,16,17,18,19,20,21,22,23,24}"
    assert rows.loc["25%", f"standard_layer_ids_{N_LAYERS}"] == "{4}"
    assert "Table 4.11" in write_table("smoke", "table_4_11", t411)[0].read_text()


def test_tables_yaml_declares_every_chapter_4_output():
    from leanlm.reporting.analytic import ANALYTIC
    from leanlm.reporting.render import PARAMS_TABLES, TABLES

    spec = yaml.safe_load((REPO / "params" / "tables.yaml").read_text())
    for name, s in spec.items():
        if not name.startswith(("table_4_", "figure_4_")):
            continue
        registry = {"results": TABLES, "params": PARAMS_TABLES, "analytic": ANALYTIC}[s["kind"]]
        assert name in registry, name
        assert s["outputs"] == (["pdf", "png", "csv"] if name.startswith("figure") else ["tex", "csv"]), name
    assert {f"table_4_{i}" for i in range(1, 12)} | {f"figure_4_{i}" for i in range(1, 9)} <= set(spec)
