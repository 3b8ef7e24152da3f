"""Committed loss trajectories: the first steps of one tiny smoke pretraining per backbone, compared on CPU.

A safety net for refactoring (torchtitan's ``tests/assets/losses/``): moving modules, renaming plug-ins or
changing how objectives are found must not change what a pretraining computes. Each case runs the real
``leanlm pretrain`` path (profile -> run -> objective -> packing -> engine) on a scratch smoke profile shrunk
to tiny models, and compares the engine's per-step training losses with ``tests/assets/losses/<case>.json``.

Tolerance: relative 1e-4 (absolute 1e-5). The runs are seeded and single-threaded, so on one machine
they repeat bit for bit; the margin covers other CPUs' float kernels (vectorised sums in another order),
which move these losses (about 1 to 6) by far less than 1e-4 relative over these few steps. A real change to the model,
data, masking or optimiser moves the losses by orders of magnitude more.

To regenerate after an intended change: ``LEANLM_WRITE_LOSS_BASELINES=1 pytest tests/test_loss_baselines.py``
(and say in the commit why the numbers moved).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
import torch

from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)

ASSETS = Path(__file__).resolve().parent / "assets" / "losses"
STEPS = 6
RTOL, ATOL = 1e-4, 1e-5

# case -> run id of the smoke matrix: one per backbone, and one hash-embedding model (ch. 2).
CASES = {
    "bert_encoder_mlm": "ch3_encoder-sha",
    "gpt2_decoder_causal_lm": "ch3_decoder-mha",
    "encoder_decoder_translation": "ch3_encdec-mha",
    "qwen_decoder_causal_lm": "ch4_uniform-standard",
    "hash_embedding_lsh_proj_shuffle_random": "ch2_hashformers-lsh_proj",
}

WORDS = ["harbour", "market", "chapel", "orchard", "meadow", "bridge", "library", "windmill", "river", "castle",
         "garden", "quarry", "village", "station", "valley", "forest"]
TRANSLATE = {"the": "das", "house": "Haus", "is": "ist", "small": "klein", "big": "groß", "old": "alt",
             "new": "neu", "red": "rot", "car": "Auto", "book": "Buch", "here": "hier", "there": "dort"}


def _documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(12):
            a, b = rng.choice(WORDS), rng.choice(WORDS)
            sentences.append(rng.choice([f"The {a} near the {b} was quiet in summer.",
                                         f"Visitors often walk from the {a} to the old {b}.",
                                         f"Many people admire the {a} every morning."]))
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture
def tiny_smoke(scratch_root):
    """The smoke profile with tiny models and STEPS pretraining steps, and tiny data on disk."""
    from leanlm import paths
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece
    from leanlm.io import write_jsonl

    def shrink(doc):
        doc["experiments"] = ["ch3_encoder", "ch3_decoder", "ch3_encdec", "ch4_uniform", "ch2_hashformers"]
        small = dict(n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=32)
        for size in ("bert", "gpt2", "qwen_500m"):
            doc["models"][size].update(small)
        doc["models"]["transformer"].update(small, n_decoder_layers=1)
        for block in ("mlm", "causal_lm", "shuffle_random", "translation"):
            doc["pretrain"][block].update(steps=STEPS, batch_size=4, seq_len=16, warmup_steps=1,
                                          checkpoint_every=None)
        doc["pretrain"]["translation"]["vocab_size"] = 120
        for family in doc["finetune"].values():  # validation: no fine-tuning window past the positions
            for key in ("max_seq_len", "max_length"):
                if key in family:
                    family[key] = min(family[key], 32)
        doc["finetune"]["squad"]["doc_stride"] = 8  # a 32-token window keeps 15 context tokens beside the question
        for variant in ("mlm_ch2", "ch4"):
            doc["pretrain_variants"][variant].update(steps=STEPS, batch_size=4, seq_len=16, warmup_steps=1,
                                                     checkpoint_every=None)

    edit_yaml(scratch_root / "params/smoke.yaml", shrink)
    data = paths.data_dir("smoke")
    for split, (n, seed) in {"train": (30, 0), "validation": (4, 1)}.items():
        write_jsonl(data / "corpus" / f"{split}.jsonl", [{"text": t} for t in _documents(n, seed)])
    texts = _documents(30, 0)
    save_tokenizer(train_wordpiece(lambda: iter(texts), vocab_size=120, lowercase=True), data / "tokenizer",
                   {"kind": "wordpiece"})
    rng = random.Random(0)
    rows = []
    for _ in range(80):
        words = rng.sample(list(TRANSLATE), rng.randint(2, 5))
        rows.append({"source": " ".join(words) + ".", "target": " ".join(TRANSLATE[w] for w in words) + "."})
    for split, part in {"train": rows[:60], "validation": rows[60:70], "test": rows[70:]}.items():
        write_jsonl(data / "tasks" / "wmt14" / f"{split}.jsonl", [{"idx": i, **r} for i, r in enumerate(part)])
    return scratch_root


def _step_losses(config, run_id: str, monkeypatch) -> list[float]:
    """The engine's training loss at every step of run ``run_id``'s pretraining."""
    from leanlm.training import engine
    from leanlm.stages.pretrain import pretrain

    seen: list[list[float]] = []
    fit = engine.Trainer.fit

    def recording_fit(self):
        summary = fit(self)
        seen.append([float(x) for x in self.state.losses[: self.state.step]])
        return summary

    monkeypatch.setattr(engine.Trainer, "fit", recording_fit)
    pretrain(config, run_id)
    assert len(seen) == 1, f"{run_id}: expected one training loop, saw {len(seen)}"
    return seen[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_losses_match_the_committed_baseline(tiny_smoke, case, monkeypatch):
    from leanlm.config import load_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = load_config("params/smoke.yaml")
        losses = _step_losses(config, CASES[case], monkeypatch)
    finally:
        torch.set_num_threads(threads)
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses), losses
    path = ASSETS / f"{case}.json"
    if os.environ.get("LEANLM_WRITE_LOSS_BASELINES") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run_id": CASES[case], "steps": STEPS, "losses": losses}, indent=1) + "\n")
    baseline = json.loads(path.read_text())
    assert baseline["run_id"] == CASES[case] and baseline["steps"] == STEPS
    for step, (got, want) in enumerate(zip(losses, baseline["losses"], strict=True)):
        assert math.isclose(got, want, rel_tol=RTOL, abs_tol=ATOL), (
            f"{case} ({CASES[case]}): step {step} loss {got!r} differs from the committed {want!r} in {path} "
            f"beyond rtol={RTOL}; all steps: {losses}")
