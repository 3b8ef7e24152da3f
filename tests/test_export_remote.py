"""Variants without a stock transformers class export with their own code (``trust_remote_code``): loaded by
``AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)`` in a fresh process where leanlm is
not importable, each gives leanlm's logits; the code shipped is self-contained and is the repository's
templates (leanlm.export.remote), and a variant the templates do not implement is refused."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from export_cases import HF_CLASSES, REMOTE_VARIANTS, run_fresh, save_run
from leanlm.errors import ConfigError

TEMPLATES = Path(__file__).resolve().parents[1] / "workflow" / "leanlm" / "export" / "remote"
ATOL = 1e-5  # fp32 on the CPU: float rounding only (direct vs linear-time forms of the mixers)
# Table 4.1's HYBRID SKIP: a trained hybrid evaluated without its simple layers (0-based odd-numbered ones).
SKIPPED = "qwen-approximate-hybrid"
MODELING = {"qwen": "modeling_leanlm_qwen", "bert": "modeling_leanlm_ch3", "gpt2": "modeling_leanlm_ch3"}
CLASSES = {("qwen", "causal_lm"): "LeanQwenForCausalLM", ("bert", "mlm"): "LeanBertForMaskedLM",
           ("bert", "classification"): "LeanBertForSequenceClassification",
           ("gpt2", "causal_lm"): "LeanGPT2ForCausalLM",
           ("gpt2", "classification"): "LeanGPT2ForSequenceClassification"}
CONFIGS = {"qwen": "LeanQwenConfig", "bert": "LeanBertConfig", "gpt2": "LeanGPT2Config"}

LOAD = """
import json, sys
import torch
import transformers
job = json.loads(sys.argv[1])
out = {}
for name, spec in job.items():
    auto = getattr(transformers, spec["auto"])
    model = auto.from_pretrained(spec["dir"], trust_remote_code=True, **spec["kwargs"]).eval()
    batch = {k: torch.tensor(v) for k, v in spec["batch"].items()}
    with torch.no_grad():
        logits = model(**batch).logits
    out[name] = {"logits": logits.tolist(), "class": type(model).__name__,
                 "module": type(model).__module__.split(".")[-1]}
    if "AutoModel" in model.config.auto_map:  # the encoder without its head, from the same export
        encoder = transformers.AutoModel.from_pretrained(spec["dir"], trust_remote_code=True).eval()
        with torch.no_grad():
            out[name]["hidden"] = encoder(**batch).last_hidden_state.tolist()
print(json.dumps(out))
"""


def _batch(config):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (3, 10), generator=g)
    ids[ids == config.pad_token_id] = config.pad_token_id + 1
    mask = torch.ones_like(ids)
    ids[2, 7:], mask[2, 7:] = config.pad_token_id, 0  # right padding, as leanlm pads
    batch = {"input_ids": ids, "attention_mask": mask}
    if config.backbone == "bert" and config.type_vocab_size:
        batch["token_type_ids"] = (torch.arange(10) >= 5).long().expand(3, 10).contiguous()
    return batch


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Every remote variant exported (the export checks its own logits in-process), then all loaded in one
    fresh process: ``{name: (leanlm's, the fresh process's)}``."""
    from leanlm.export import export_hf

    root = tmp_path_factory.mktemp("remote")
    ours, job = {}, {}
    for name, (fields, head, make_tokenizer) in REMOTE_VARIANTS.items():
        model = save_run(root / name / "ckpt", fields, head, make_tokenizer(), run_id=name)
        export_hf(root / name / "ckpt", root / name / "hf")
        runs = {name: ((), {})}
        if name == SKIPPED:
            skip = [i for i, kind in enumerate(model.layer_kinds) if kind == "simple"]
            runs[f"{name}-skip"] = (skip, {"skip_layers": skip})
        batch = _batch(model.config)
        for run, (skip, kwargs) in runs.items():
            model.skip_layers = skip
            with torch.no_grad():
                ours[run] = {"logits": model(**batch)["logits"], "mask": batch["attention_mask"].bool(),
                             "head": head, "backbone": fields["backbone"]}
                if fields["backbone"] == "bert":
                    ours[run]["hidden"] = model.encoder(**batch)[0]
            job[run] = {"dir": str(root / name / "hf"), "kwargs": kwargs, "auto": HF_CLASSES[head],
                        "batch": {k: v.tolist() for k, v in batch.items()}}
    theirs = run_fresh(LOAD, root, job)
    return {run: (ours[run], theirs[run]) for run in job}, root


@pytest.mark.parametrize("name", sorted(REMOTE_VARIANTS) + [f"{SKIPPED}-skip"])
def test_transformers_computes_leanlms_logits_with_the_exported_code(round_trips, name):
    ours, theirs = round_trips[0][name]
    logits = torch.tensor(theirs["logits"])
    assert logits.shape == ours["logits"].shape  # the real vocabulary: padded rows stayed behind
    if ours["head"] == "classification":
        torch.testing.assert_close(logits, ours["logits"], atol=ATOL, rtol=1e-4)
    else:  # per token: padded positions of a row are nobody's output
        torch.testing.assert_close(logits[ours["mask"]], ours["logits"][ours["mask"]], atol=ATOL, rtol=1e-4)
    assert theirs["class"] == CLASSES[ours["backbone"], ours["head"]]
    assert ("hidden" in theirs) == (ours["backbone"] == "bert")  # AutoModel: BERT's encoder
    if "hidden" in theirs:
        hidden = torch.tensor(theirs["hidden"])
        torch.testing.assert_close(hidden[ours["mask"]], ours["hidden"][ours["mask"]], atol=ATOL, rtol=1e-4)
    assert theirs["module"] == MODELING[ours["backbone"]]


def test_skipping_the_simple_layers_changes_the_logits(round_trips):
    # the skip test above compares something: leaving the simple layers out is another model
    full, skipped = (torch.tensor(round_trips[0][run][1]["logits"]) for run in (SKIPPED, f"{SKIPPED}-skip"))
    assert (full - skipped).abs().max() > 1e-2


def test_the_export_ships_the_repositorys_templates_and_points_auto_map_at_them(round_trips):
    root = round_trips[1]
    for name, (fields, head, _) in REMOTE_VARIANTS.items():
        out, backbone = root / name / "hf", fields["backbone"]
        config = json.loads((out / "config.json").read_text(encoding="utf-8"))
        assert config["auto_map"] == {"AutoConfig": f"configuration_leanlm.{CONFIGS[backbone]}",
                                      HF_CLASSES[head]: f"{MODELING[backbone]}.{CLASSES[backbone, head]}",
                                      **({"AutoModel": "modeling_leanlm_ch3.LeanBertModel"} if backbone == "bert"
                                         else {})}
        assert config["model_type"] == f"leanlm_{backbone}"
        shipped = ["configuration_leanlm.py", f"{MODELING[backbone]}.py"]
        if backbone != "qwen":  # the ch. 3 template imports its siblings
            shipped += ["modeling_leanlm_attention.py", "modeling_leanlm_hash.py"]
        assert sorted(p.name for p in out.glob("*.py")) == sorted(shipped)
        for code in shipped:
            assert (out / code).read_text(encoding="utf-8") == (TEMPLATES / code).read_text(encoding="utf-8")
        assert (out / "tokenizer.json").is_file()


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.py")
                                            if p.name.startswith(("configuration_", "modeling_"))))
def test_a_template_imports_only_torch_transformers_and_its_sibling_templates(template):
    tree = ast.parse((TEMPLATES / template).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: another template, copied beside it
                assert (TEMPLATES / f"{node.module}.py").is_file(), (template, node.module)
                continue
            roots = {node.module.split(".")[0]}
        else:
            continue
        assert roots <= {"math", "torch", "transformers"}, (template, roots)


def test_a_mixer_the_template_does_not_implement_is_refused(tmp_path, monkeypatch):
    from export_cases import end_of_text_bpe
    from leanlm.export import export_hf
    from leanlm.export.remote import modeling_leanlm_qwen

    fields = REMOTE_VARIANTS["qwen-approximate-uniform"][0]
    save_run(tmp_path / "ckpt", fields, "causal_lm", end_of_text_bpe())
    monkeypatch.delitem(modeling_leanlm_qwen.MIXERS, "approximate")
    with pytest.raises(ConfigError, match="attention='approximate' cannot be exported to transformers' "
                                          "LeanQwenForCausalLM: modeling_leanlm_qwen.py implements"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_the_standard_decoder_still_exports_to_the_stock_class(tmp_path):
    from export_cases import VARIANTS, end_of_text_bpe
    from leanlm.export import export_hf

    save_run(tmp_path / "ckpt", VARIANTS["qwen-standard"][0], "causal_lm", end_of_text_bpe())
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["Qwen2ForCausalLM"] and "auto_map" not in config
    assert not list((tmp_path / "hf").glob("*.py"))
