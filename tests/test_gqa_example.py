"""docs/extending.md's worked example, run as the recipe says: grouped-query attention (``gqa``, not in the
thesis) is one file, modeling/attention/gqa.py, plus one row in params/experiments/ch3.yaml; the row validates,
its smoke pretraining job runs through the CLI the pretrain rule calls, and a misconfigured option is refused by
``leanlm validate`` naming the variant and the key.

The row is added in a scratch copy of params/ (the thesis's matrices stay as they are: a row there would add a
run to every profile's tables), the pretraining is shortened to a few steps on a tiny corpus.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from leanlm import paths
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)
from test_ch2_pipeline import _texts, _write_jsonl  # noqa: E402  (the tiny ch. 2 corpus)

ROOT = Path(__file__).resolve().parents[1]
ROW = "    gqa:     {attention: gqa, n_kv_heads: 2}\n"  # the recipe's one row, under ch3_encoder's runs


def _add_row(root: Path, row: str) -> None:
    """Add ``row`` to ch3_encoder's runs in the scratch params/experiments/ch3.yaml, as a contributor would."""
    path = root / "params" / "experiments" / "ch3.yaml"
    lines = path.read_text().splitlines(keepends=True)
    anchor = lines.index("ch3_encoder:\n")
    last = next(i for i in range(anchor, len(lines)) if lines[i].startswith("    linear:"))
    path.write_text("".join(lines[:last + 1] + [row] + lines[last + 1:]))


def _leanlm(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``leanlm <args>`` in the scratch project, as the rules call it."""
    env = {**os.environ, "LEANLM_ROOT": str(root), "OMP_NUM_THREADS": "1", "LEANLM_FORKSERVER": "off",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "workflow"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "leanlm.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def _tiny_data(root: Path) -> None:
    """A few steps of MLM on a tiny corpus and word-piece vocabulary (the data stages' outputs)."""
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece

    edit_yaml(root / "params" / "smoke.yaml",
              lambda doc: doc["pretrain"]["mlm"].update(steps=3, batch_size=4, warmup_steps=1, checkpoint_every=None))
    data = paths.data_dir("smoke")
    _write_jsonl(data / "corpus/train.jsonl", [{"text": t} for t in _texts(40, 30, 0)])
    _write_jsonl(data / "corpus/validation.jsonl", [{"text": t} for t in _texts(6, 30, 1)])
    texts = _texts(40, 30, 0)
    save_tokenizer(train_wordpiece(lambda: iter(texts), vocab_size=80, lowercase=True), data / "tokenizer",
                   {"kind": "wordpiece"})


def test_gqa_is_one_file_and_one_row_and_its_smoke_job_runs(scratch_root):
    from safetensors import safe_open

    from leanlm.config import load_config
    from leanlm.runs import get_run

    _add_row(scratch_root, ROW)
    _tiny_data(scratch_root)
    run = get_run(load_config(scratch_root / "params" / "smoke.yaml"), "ch3_encoder-gqa")
    assert run.model["attention"] == "gqa" and run.model["n_kv_heads"] == 2
    checked = _leanlm(scratch_root, "validate", "--params", "params/smoke.yaml")
    assert checked.returncode == 0, checked.stderr[-3000:]
    done = _leanlm(scratch_root, "pretrain", "--params", "params/smoke.yaml", "--run", "ch3_encoder-gqa")
    assert done.returncode == 0, done.stderr[-3000:]
    weights = scratch_root / "models" / "smoke" / "ch3_encoder-gqa" / "model.safetensors"
    with safe_open(str(weights), "pt") as saved:
        keys = [k for k in saved.keys() if k.endswith("layers.0.attention.key.weight")]
        assert keys, sorted(saved.keys())[:10]
        # two key/value heads of head_dim: the model is GQA, not MHA under another name
        assert saved.get_tensor(keys[0]).shape == (2 * run.model["head_dim"], run.model["d_model"])


def test_a_misconfigured_option_is_refused_by_validate_naming_variant_and_key(scratch_root):
    _add_row(scratch_root, "    gqa:     {attention: gqa, n_kv_heads: 3}\n")  # 3 does not divide the 4 heads
    done = _leanlm(scratch_root, "validate", "--params", "params/smoke.yaml")
    assert done.returncode != 0
    assert "attention 'gqa'" in done.stderr and "n_kv_heads=3" in done.stderr, done.stderr[-2000:]
    assert "ch3_encoder-gqa" in done.stderr  # where: the run


def test_an_option_the_variant_does_not_take_is_refused_by_validate(scratch_root):
    _add_row(scratch_root, "    mha_kv:  {attention: mha, n_kv_heads: 2}\n")  # MHA has no key/value groups
    done = _leanlm(scratch_root, "validate", "--params", "params/smoke.yaml")
    assert done.returncode != 0
    assert "attention 'mha'" in done.stderr and "n_kv_heads" in done.stderr, done.stderr[-2000:]
