"""`leanlm budget`: compute and disk of a profile from its runs, checked against real models."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leanlm import budget
from leanlm.benchmarks.pretraining import flops_per_token
from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import non_embedding_parameters, total_parameters
from leanlm.modeling.heads import BertForMLM
from leanlm.modeling.models import build_model
from leanlm.runs import get_run, pretrain_settings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "params" / "paper.yaml")


def test_meta_built_model_counts_equal_a_real_model(paper):
    # ch. 3's BERT-base MHE-MUL, built for real on the CPU: the meta-device count must agree exactly.
    run = get_run(paper, "ch3_encoder-mhe_mul")
    b = budget.pretrain_budget(paper, run)
    real = build_model(ModelConfig.from_dict({**run.model, "vocab_size": 30522}), "mlm")
    assert b.parameters == total_parameters(real)
    assert b.non_embedding == non_embedding_parameters(real)
    # A checkpoint stores the padded vocabulary rows (30,528 = 30,522 rounded up to 64), which no count includes.
    assert b.checkpoint_bytes == 4 * sum(p.numel() for p in real.parameters())
    assert b.checkpoint_bytes - 4 * total_parameters(real) == 4 * (30528 - 30522) * (768 + 1)  # table rows, head bias


def test_bert_flops_per_token_are_bench_accounting_plus_the_masked_output(paper):
    run = get_run(paper, "ch3_encoder-mha")
    settings = pretrain_settings(paper, run)
    b = budget.pretrain_budget(paper, run)
    config = ModelConfig.from_dict({**run.model, "vocab_size": 30522})
    with torch.device("meta"):
        model = BertForMLM(config)
    output = round(6 * 30522 * 768 * settings["mask_prob"])
    assert b.flops_per_token == flops_per_token(model, settings["seq_len"]) + output
    # Table 3.11: 1M steps of 128 x 512 tokens.
    assert b.tokens == 1_000_000 * 128 * 512


def test_qwen_tokens_follow_the_global_batch_and_the_token_budget(paper):
    run = get_run(paper, "ch4_uniform-standard")
    b = budget.pretrain_budget(paper, run)
    # DESIGN §8: 28,611 steps of 256 sequences of 2048 tokens, about 15B tokens.
    assert b.tokens == 28_611 * 16 * 16 * 2048
    assert 14.9e9 < b.tokens < 15.1e9
    # Untied Pythia embedding (50,304 rows) and output: about 0.5B parameters (Table 4.10's size).
    assert 4.5e8 < b.parameters < 5.5e8


def test_hours_scale_inversely_with_mfu_and_bad_values_are_refused():
    assert budget.gpu_hours(3.6e15, 1e12, 1.0) == pytest.approx(1.0)
    assert budget.gpu_hours(3.6e15, 1e12, 0.5) == pytest.approx(2.0)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="--mfu"):
            budget.check_fraction(bad)


def test_readme_budget_command_runs_verbatim_and_reports_every_chapter():
    # docs/budget.md's command, as written there (and in the README).
    readme = (REPO / "docs" / "budget.md").read_text()
    command = "leanlm budget --params params/paper.yaml"
    assert command in readme and command in (REPO / "README.md").read_text()
    proc = subprocess.run([sys.executable, "-m", "leanlm.cli", *command.split()[1:]], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for chapter in ("ch2", "ch3", "ch4", "all"):
        assert f"| {chapter} |" in proc.stdout
    assert "final checkpoints" in proc.stdout
    # Every pretraining run's peak GPU memory, and every one fits the 80 GB H100 the profile declares.
    paper = load_config(REPO / "params" / "paper.yaml")
    assert paper["resources"]["pretrain"]["gpu_memory_gb"] == 80
    memory_rows = [line for line in proc.stdout.splitlines() if line.startswith("| ch") and " x " in line]
    assert [row.split(" | ")[0].removeprefix("| ") for row in memory_rows] == [
        run.run_id for run in budget.pretrained_runs(paper)]
    assert all(row.endswith("| yes |") for row in memory_rows), [r for r in memory_rows if not r.endswith("| yes |")]
    # docs/budget.md's copy of the report is the command's output on this code, not typed numbers.
    section = readme.split("## Compute and disk budget", 1)[1].split("\n## ", 1)[0]
    printed = [line for line in section.splitlines() if line.startswith("| ")]
    assert printed and all(line in proc.stdout.splitlines() for line in printed), (
        "docs/budget.md's budget tables differ from `leanlm budget --params params/paper.yaml`: paste its output")


def test_unknown_gpu_is_a_clear_error():
    proc = subprocess.run([sys.executable, "-m", "leanlm.cli", "budget", "--params", "params/smoke.yaml",
                           "--gpu", "Voodoo3"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "Voodoo3" in proc.stderr


def _official_head(config: dict) -> dict:
    """``config`` with the official code's S+R head (dropout + Linear(d, 3)), as a profile sets it."""
    official = copy.deepcopy(config)
    official["pretrain"]["shuffle_random"]["head"] = "official_code"
    return official


def test_the_budget_builds_the_shuffle_random_head_the_profile_picks(paper):
    """``pretrain.shuffle_random.head: official_code`` drops BERT's dense + GELU + LayerNorm transform:
    d^2 + 3d = 592,128 pretraining parameters at BERT-base, which the budget counts from the model it builds."""
    run = get_run(paper, "ch2_hashformers-bert_sr")
    official = _official_head(paper)
    ours, theirs = budget.pretrain_budget(paper, run), budget.pretrain_budget(official, run)
    assert ours.parameters - theirs.parameters == 768 * 768 + 3 * 768 == 592_128
    settings = pretrain_settings(official, run)
    with torch.device("meta"):
        built = build_model(budget.run_model_config(official, run, settings), "shuffle_random",
                            head_type="official_code")
    assert theirs.parameters == total_parameters(built)
    assert theirs.checkpoint_bytes == 4 * sum(p.numel() for p in built.parameters())


def test_the_memory_estimates_build_the_head_the_profile_picks(paper, monkeypatch):
    """Every run's memory estimate is made for the model its pretraining builds, the S+R head included."""
    import leanlm.memory

    asked = {}
    monkeypatch.setattr(leanlm.memory, "run_memory", lambda run_id, head, *args, **kwargs: asked.setdefault(
        run_id, (head, kwargs.get("head_options"))))
    budget.run_memories(_official_head(paper))
    assert asked["ch2_hashformers-bert_sr"] == ("shuffle_random", {"head_type": "official_code"})
    assert asked["ch2_hashformers-md5_proj"] == ("shuffle_random", {"head_type": "official_code"})
    assert asked["ch2_hashformers-bert_mlm"] == ("mlm", {})
    asked.clear()
    budget.run_memories(paper)
    assert asked["ch2_hashformers-bert_sr"] == ("shuffle_random", {})
