"""Issue 24, cases 11 and 13: what used to be refused only at job time (after hours of training at paper
scale), or not at all, is refused by ``leanlm validate`` (and so by ``make reproduce`` before Snakemake):

- 11: ``steps: 1`` with ``warmup_steps: 1`` trained its only step at learning rate 0 (the "pretrained"
  model was its initialisation);
- 13: a perplexity ``stride`` wider than its window, or a window longer than the model's positions (checked
  only by the lm runner); a profile with a pretraining block but not the model size Table 3.11 prints it
  beside (a KeyError in the render job); Tables 3.5-3.8 naming no ``families:``, so a subset without
  SuperGLUE scheduled Tables 3.6/3.8 and failed after all training.
"""

from __future__ import annotations

import pytest

from params_files import edit_yaml
from test_faults import snakemake, validate, workflow_project


def _smoke(root):
    return root / "params" / "smoke.yaml"


def _refused(root, capsys, *expected):
    code, out = validate(_smoke(root), capsys)
    assert code == 2 and "Traceback" not in out, out
    for text in ("smoke.yaml", *expected):
        assert text in out, (text, out)


def test_a_run_that_never_leaves_a_zero_learning_rate_is_refused(scratch_root, capsys):
    edit_yaml(_smoke(scratch_root), lambda d: d["pretrain"]["mlm"].update(steps=1, warmup_steps=1))
    _refused(scratch_root, capsys, "pretrain.mlm.steps = 1", "pretrain.mlm.warmup_steps = 1", "learning rate 0",
             "its initialisation")


def test_one_step_without_warmup_still_learns(scratch_root, capsys):
    """The degenerate case that is fine: no warm-up, so step 0 trains at the peak rate."""
    edit_yaml(_smoke(scratch_root), lambda d: d["pretrain"]["mlm"].update(steps=1, warmup_steps=0))
    code, out = validate(_smoke(scratch_root), capsys)
    assert code == 0, out


def test_a_stride_wider_than_the_window_is_refused(scratch_root, capsys):
    edit_yaml(_smoke(scratch_root), lambda d: d["finetune"]["lm"].update(stride=128, max_length=64))
    _refused(scratch_root, capsys, "finetune.lm.stride = 128", "window of 64 tokens", "never be scored")


def test_a_window_longer_than_the_positions_is_refused(scratch_root, capsys):
    def longer(d):
        d["finetune"]["lm"].update(max_length=4 * d["models"]["gpt2"]["max_position"])
    edit_yaml(_smoke(scratch_root), longer)
    _refused(scratch_root, capsys, "finetune.lm.max_length", "exceeds the", "positions of run ch3_decoder")


def test_a_pretraining_block_without_its_model_is_refused_for_table_3_11(scratch_root, capsys):
    def drop_transformer(d):
        d["experiments"] = [e for e in d["experiments"] if not e.startswith("ch3_encdec")]
        del d["models"]["transformer"]
    edit_yaml(_smoke(scratch_root), drop_transformer)
    _refused(scratch_root, capsys, "table_3_11", "pretrain.translation is set but models.transformer is not")


@pytest.mark.slow
def test_a_subset_without_superglue_plans_no_superglue_table(scratch_root):
    root = workflow_project(scratch_root)
    edit_yaml(_smoke(root), lambda d: d.update(subsets={"enc_glue": [{"ch3_encoder": ["glue"]}]}))
    proc = snakemake(root, "-n", "--cores", "1", "--configfile", str(_smoke(root)), "--config", "subset=enc_glue")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "table_3_5.tex" in out and "table_3_7.tex" in out, out
    assert "table_3_6" not in out and "table_3_8" not in out, out
