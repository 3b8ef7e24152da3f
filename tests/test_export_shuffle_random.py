"""ch. 2's pretrained models export with their Shuffle+Random head: every HashFormer (MD5 / LSH, Emb, Pool, Add,
Proj; words and pieces), BERT-S+R and ProFormer's saved model, with the run's fields from params/smoke.yaml.
In a fresh process where leanlm is not importable, ``AutoModelForTokenClassification`` (3 labels by name) takes
text to leanlm's S+R logits, and ``AutoModel`` loads the encoder without its head from the same export, giving
leanlm's encoder output (what a researcher fine-tunes)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from export_cases import SHUFFLE_RANDOM_CASES as CASES, leanlm_logits, run_fresh, save_hash_run

TEMPLATES = Path(__file__).resolve().parents[1] / "workflow" / "leanlm" / "export" / "remote"
SINGLES = ["The cat sat on the mat.", "Unseen words: zyzzyva, quokka!! [MASK] and [UNK]"]
PAIRS = (["a dog ran in the park", "Hello there"], ["fast, faster, fastest.", "hashing [SEP] pieces"])
CLASSES = {"bert_sr-official": "BertForTokenClassification"}  # the others: the template's
LOAD = """
import json, sys
import torch
import transformers
job = json.loads(sys.argv[1])
out = {}
for name, spec in job.items():
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"], trust_remote_code=True)
    model = transformers.AutoModelForTokenClassification.from_pretrained(spec["dir"], trust_remote_code=True).eval()
    encoder = transformers.AutoModel.from_pretrained(spec["dir"], trust_remote_code=True).eval()
    out[name] = {"model": type(model).__name__, "encoder": type(encoder).__name__, "labels": model.config.id2label}
    for part, texts in spec["inputs"].items():
        batch = tokenizer(*texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out[name][part] = {"logits": model(**batch).logits.tolist(),
                               "hidden": encoder(**batch).last_hidden_state.tolist()}
print(json.dumps(out))
"""


@lru_cache(maxsize=1)
def smoke_runs() -> dict:
    from leanlm.config import load_config
    from leanlm.runs import runs

    return {run.run_id: run for run in runs(load_config())}


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Every case exported, then all loaded in one fresh process: ``{name: (leanlm's, theirs)}``."""
    from leanlm.export import export_hf
    from leanlm.hashing.codebook import HashCodebook
    from leanlm.hashing.inputs import CodebookTokenizer, PieceCodebookTokenizer
    from export_cases import wordpiece

    root = tmp_path_factory.mktemp("shuffle_random")
    ours, job = {}, {}
    for name, (run_id, head_type) in CASES.items():
        run = smoke_runs()[run_id]
        assert run.objective in ("shuffle_random", "none")  # pretrained with its S+R head (ProFormer: saved so)
        model, tokenizer = save_hash_run(root / name / "ckpt", dict(run.model), "shuffle_random", run_id,
                                         pieces=run.tokenizer != "hash", head_type=head_type)
        export_hf(root / name / "ckpt", root / name / "hf")
        if isinstance(tokenizer, CodebookTokenizer):  # the saved codebook, as leanlm loads it
            book = HashCodebook.load(root / name / "ckpt" / "codebook")
            tokenizer = (PieceCodebookTokenizer(wordpiece(), book) if isinstance(tokenizer, PieceCodebookTokenizer)
                         else CodebookTokenizer(book))
        ours[name] = {}
        for part, texts in {"singles": SINGLES, "pairs": PAIRS}.items():
            logits, batch = leanlm_logits(model, tokenizer, texts)
            with torch.no_grad():
                hidden = model.encoder(**batch)[0]  # the encoder without the S+R head
            ours[name][part] = (logits, hidden, batch["attention_mask"].bool())
        job[name] = {"dir": str(root / name / "hf"), "inputs": {"singles": [SINGLES], "pairs": list(PAIRS)}}
    theirs = run_fresh(LOAD, root, job)
    return {name: (ours[name], theirs[name]) for name in job}, root


@pytest.mark.parametrize("name", sorted(CASES))
def test_text_to_shuffle_random_logits_and_encoder_states_equal_leanlms(round_trips, name):
    ours, theirs = round_trips[0][name]
    for part in ("singles", "pairs"):
        logits, hidden, real = ours[part]
        theirs_logits, theirs_hidden = (torch.tensor(theirs[part][k]) for k in ("logits", "hidden"))
        assert theirs_logits.shape == logits.shape and logits.shape[-1] == 3
        torch.testing.assert_close(theirs_logits[real], logits[real], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(theirs_hidden[real], hidden[real], atol=1e-5, rtol=1e-4)
    assert theirs["labels"] == {"0": "original", "1": "shuffled", "2": "random"}
    stock = name in CLASSES
    assert theirs["model"] == CLASSES.get(name, "LeanBertForTokenClassification")
    assert theirs["encoder"] == ("BertModel" if stock else "LeanBertModel")


def test_the_labels_are_the_corruptions_classes():
    from leanlm.modeling.shuffle_random import LABELS
    from leanlm.training.shuffle_random import ORIGINAL, RANDOM, SHUFFLED

    assert (LABELS[ORIGINAL], LABELS[SHUFFLED], LABELS[RANDOM]) == ("original", "shuffled", "random")


def test_the_export_points_auto_map_at_the_head_and_the_encoder(round_trips):
    root = round_trips[1]
    for name, (_run_id, head_type) in CASES.items():
        config = json.loads((root / name / "hf" / "config.json").read_text(encoding="utf-8"))
        if name in CLASSES:  # stock: transformers' own classes, no code shipped
            assert config["architectures"] == ["BertForTokenClassification"] and "auto_map" not in config
            assert not list((root / name / "hf").glob("*.py"))
            continue
        assert config["shuffle_random_head"] == head_type
        assert config["auto_map"] == {"AutoConfig": "configuration_leanlm.LeanBertConfig",
                                      "AutoModelForTokenClassification":
                                          "modeling_leanlm_ch3.LeanBertForTokenClassification",
                                      "AutoModel": "modeling_leanlm_ch3.LeanBertModel"}
        for code in ("configuration_leanlm.py", "modeling_leanlm_ch3.py", "modeling_leanlm_attention.py",
                     "modeling_leanlm_hash.py"):
            assert (root / name / "hf" / code).read_bytes() == (TEMPLATES / code).read_bytes()
