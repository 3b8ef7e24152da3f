"""Each variant with a stock class round-trips: exported by ``leanlm export-hf``, loaded by ``AutoModelFor*``
and ``AutoTokenizer`` in a fresh process where leanlm is not importable, it gives leanlm's logits and
token ids; lm-evaluation-harness's own HFLM scores exported ch. 4 decoders (the stock Qwen2 and two with their
own code) as leanlm's adapter does."""

from __future__ import annotations

import json

import pytest
import torch

from export_cases import HF_CLASSES, REMOTE_VARIANTS, VARIANTS, run_fresh, save_run

SAMPLES = ["the cat sat on the mat.", "Hello world: models load anywhere!", "padding rows never reach a logit"]
ATOL = 1e-5  # fp32 on the CPU: float rounding only

LOAD = """
import json, sys
import torch
import transformers
job = json.loads(sys.argv[1])
out = {}
for name, spec in job.items():
    model = getattr(transformers, spec["cls"]).from_pretrained(spec["dir"]).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"])
    batch = {k: torch.tensor(v) for k, v in spec["batch"].items()}
    with torch.no_grad():
        logits = model(**batch).logits
    out[name] = {"logits": logits.tolist(), "class": type(model).__name__,
                 "ids": [tokenizer(text)["input_ids"] for text in spec["texts"]]}
print(json.dumps(out))
"""


def _batch(config, head):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (3, 10), generator=g)
    ids[ids == config.pad_token_id] = config.pad_token_id + 1
    mask = torch.ones_like(ids)
    if head != "causal_lm":  # right padding: the classifiers pool the last real token / [CLS]
        ids[2, 7:] = config.pad_token_id
        mask[2, 7:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if config.backbone == "bert":
        batch["token_type_ids"] = (torch.arange(10) >= 5).long().expand(3, 10).contiguous()
    return batch


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Every variant exported, then loaded in one fresh process: ``{name: (leanlm's, the fresh process's)}``."""
    from leanlm.export import export_hf

    root = tmp_path_factory.mktemp("export")
    ours, job = {}, {}
    for name, (fields, head, make_tokenizer) in VARIANTS.items():
        tokenizer = make_tokenizer()
        model = save_run(root / name / "ckpt", fields, head, tokenizer, run_id=name)
        export_hf(root / name / "ckpt", root / name / "hf")
        batch = _batch(model.config, head)
        with torch.no_grad():
            logits = model(**batch)["logits"]
        ours[name] = {"logits": logits, "mask": batch["attention_mask"].bool(), "head": head,
                      "ids": [tokenizer.encode(text).ids for text in SAMPLES]}
        job[name] = {"cls": HF_CLASSES[head], "dir": str(root / name / "hf"), "texts": SAMPLES,
                     "batch": {k: v.tolist() for k, v in batch.items()}}
    theirs = run_fresh(LOAD, root, job)
    return {name: (ours[name], theirs[name]) for name in VARIANTS}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_transformers_computes_leanlms_logits(round_trips, name):
    ours, theirs = round_trips[name]
    logits = torch.tensor(theirs["logits"])
    assert logits.shape == ours["logits"].shape  # the real vocabulary: the padded rows stayed behind
    if ours["head"] == "classification":
        torch.testing.assert_close(logits, ours["logits"], atol=ATOL, rtol=1e-4)
    else:  # per token: padded positions of a row are nobody's output
        torch.testing.assert_close(logits[ours["mask"]], ours["logits"][ours["mask"]], atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_autotokenizer_gives_leanlms_token_ids(round_trips, name):
    ours, theirs = round_trips[name]
    assert theirs["ids"] == ours["ids"]
    assert all(len(ids) > 2 for ids in ours["ids"])  # real text, not a vocabulary of unknowns


def test_the_stock_classes(round_trips):
    classes = {name: theirs["class"] for name, (_, theirs) in round_trips.items()}
    assert classes["bert-mlm"] == "BertForMaskedLM"
    assert classes["gpt2-causal_lm"] == "GPT2LMHeadModel"
    assert classes["gpt2-classification"] == "GPT2ForSequenceClassification"
    assert classes["qwen-standard"] == classes["qwen-standard-gqa-untied"] == "Qwen2ForCausalLM"
    assert classes["qwen-standard-qk_norm"] == "Qwen3ForCausalLM"


HFLM = """
import json, sys
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
job = json.loads(sys.argv[1])
lm = HFLM(pretrained=job["dir"], backend="causal", device="cpu", batch_size=2, dtype="float32",
          trust_remote_code=job["remote"])
requests = [Instance(request_type="loglikelihood", doc={}, arguments=tuple(pair), idx=i)
            for i, pair in enumerate(job["pairs"])]
print(json.dumps([list(r) for r in lm.loglikelihood(requests)]))
"""
PAIRS = [["the cat sat on", " the mat."], ["hello world:", " this is leanlm"], ["a dog", " ran in the park"],
         ["models in transformers'", " layout load anywhere"], ["padding", " rows never reach a logit"]]


# The stock Qwen2 export, and ch. 4 decoders with their own code (trust_remote_code): an MLP-mixer and an
# Approximate hybrid.
HFLM_DECODERS = {"qwen-standard": VARIANTS["qwen-standard"], "qwen-mlp-uniform": REMOTE_VARIANTS["qwen-mlp-uniform"],
                 "qwen-approximate-hybrid": REMOTE_VARIANTS["qwen-approximate-hybrid"]}


@pytest.mark.parametrize("name", sorted(HFLM_DECODERS))
def test_lm_eval_hflm_scores_an_exported_decoder_as_leanlms_adapter(tmp_path, name):
    # lm-eval's HF backend needs accelerate, which the project's "lmeval" extra installs with lm-eval: no skip.
    from lm_eval.api.instance import Instance

    from leanlm.export import export_hf
    from leanlm.lm_eval.adapter import LeanLMEvalAdapter

    fields, head, make_tokenizer = HFLM_DECODERS[name]
    tokenizer = make_tokenizer()
    model = save_run(tmp_path / "ckpt", fields, head, tokenizer, run_id=name)
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    remote = name not in VARIANTS
    assert remote == (tmp_path / "hf" / "modeling_leanlm_qwen.py").is_file()
    theirs = run_fresh(HFLM, tmp_path, {"dir": str(tmp_path / "hf"), "pairs": PAIRS, "remote": remote})
    adapter = LeanLMEvalAdapter(model, tokenizer, batch_size=2)
    ours = adapter.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=tuple(p), idx=i)
                                  for i, p in enumerate(PAIRS)])
    assert len(theirs) == len(ours) == len(PAIRS)
    for (their_logprob, their_greedy), (our_logprob, our_greedy) in zip(theirs, ours):
        assert their_logprob == pytest.approx(our_logprob, abs=1e-4)
        assert bool(their_greedy) == bool(our_greedy)
    assert len({round(lp, 3) for lp, _ in ours}) == len(PAIRS)  # distinct requests, distinct scores
