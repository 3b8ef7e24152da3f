"""The models the experiment matrix trains, one case per distinct model, with a batch for each: shared
by the tests that must hold for every model (test_bf16: a bf16 training step; test_recompute: activation
checkpointing).

:func:`distinct_models` reads the smoke profile's runs of every params/experiments/*.yaml family (ch. 2's
hash embeddings, ch. 3's attention variants in each backbone they are used with, ch. 4's mixers in every
layout, with GQA and q/k norms where the matrix has them), one case per distinct model, plus any
registered ch. 3 attention or ch. 4 mixer the matrix does not train (each mixer in the uniform and hybrid
layouts, each attention in the BERT encoder): a new variant is covered without editing the tests.
"""

from __future__ import annotations

import json
from collections import Counter

import torch

from leanlm.config import load_config, load_matrix
from leanlm.hashing import HashCodebook, word_tokenize
from leanlm.modeling.attention import ATTENTION
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hash_features import codebook_settings, embedding_features
from leanlm.modeling.mixers import MIXERS
from leanlm.modeling.models import build_model
from leanlm.plugins import OBJECTIVES
from leanlm.runs import runs
from leanlm.routes.fixed_text import needs_fixed_text

BATCH, LENGTH, VOCAB = 2, 16, 96
PAD = 4  # padded positions at the end of the batch's second row (the masked paths run too)
# Tokens per chunk of the chunked mixers (Approximate's Taylor kernel, the appendix's form,
# Non-approximate's running softmax) in these tests: any value gives the same result (their
# docstrings), and 4 makes a 16-token batch four chunks, so the states carried from chunk to chunk
# (all but the first chunk of the pipeline's 2048-token sequences) are trained here too.
CHUNK = 4

WORDS = ("the cat sat on a mat while dogs ran far away from home and birds sang songs in tall green "
         "trees near quiet rivers under grey skies").split()


def distinct_models() -> dict[str, tuple[dict, str]]:
    """``{case id: (model fields, head)}``: one case per distinct model of the matrix (the first run
    that trains it names it), then the registered variants the matrix leaves out."""
    config = load_config()  # the smoke profile: every experiment family, at a small scale
    missing = sorted(set(load_matrix()) - set(config["_matrix"]))
    assert not missing, (f"params/smoke.yaml leaves out experiment families {missing}: the bf16 cases "
                         "are read from it, so add them there (or read these cases elsewhere)")
    cases: dict[str, tuple[dict, str]] = {}
    seen: set[str] = set()

    def add(name: str, fields: dict, head: str) -> None:
        key = json.dumps([fields, head], sort_keys=True)
        if key not in seen:
            seen.add(key)
            cases[name] = (fields, head)

    for run in runs(config):
        head = OBJECTIVES.get(run.objective).head
        if head:  # objective "hub" downloads a trained model: nothing of ours trains
            add(run.run_id, dict(run.model), head)
    trained = {(fields["backbone"], fields["attention"]) for fields, _ in cases.values()}
    qwen = next(fields for fields, _ in cases.values() if fields["backbone"] == "qwen")
    bert = next(fields for fields, head in cases.values() if fields["backbone"] == "bert"
                and head == "mlm" and fields.get("embedding", "standard") == "standard")
    for name in MIXERS.names():
        if ("qwen", name) not in trained:
            for layout in ("uniform", "hybrid"):
                add(f"registry-qwen-{name}-{layout}", {**qwen, "attention": name, "layout": layout},
                    "causal_lm")
    for name in ATTENTION.names():
        if not any(attention == name for _, attention in trained):
            # a variant's own options (leanlm.modeling.variants): GQA groups the heads in pairs
            options = {"n_kv_heads": bert["n_heads"] // 2} if "n_kv_heads" in ATTENTION.get(name).options else {}
            add(f"registry-bert-{name}", {**bert, "attention": name, **options}, "mlm")
    return cases


def build(fields: dict, head: str, dropout: float = 0.0) -> torch.nn.Module:
    """The case's model at the tests' vocabulary, seeded, in train mode (``dropout`` for every dropout
    of the model; 0 by default so that two runs of a step compute the same network)."""
    config = ModelConfig.from_dict({**fields, "vocab_size": VOCAB, "dropout": dropout,
                                    "attention_dropout": dropout})
    torch.manual_seed(0)
    model = build_model(config, head)
    if needs_fixed_text(model):
        # FixedSeqQK's fixed text (a held-out document in the pipeline): any max_position ids do here.
        model.set_fixed_sequence(torch.arange(config.max_position) % VOCAB)
    return model.train()


def use_small_chunks(monkeypatch) -> None:
    """Make every chunked mixer work in chunks of CHUNK tokens (for a fixture)."""
    for name in MIXERS.names():
        if hasattr(MIXERS.get(name), "chunk_size"):
            monkeypatch.setattr(MIXERS.get(name), "chunk_size", CHUNK)


def token_ids(config: ModelConfig, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
    """(B, L) ids with the second row's last PAD positions padded (id 0), and the hash features the
    model's word embedding reads (from a codebook of the batch's own words, as the pipeline builds)."""
    if codebook_settings(config) is None:
        ids = torch.randint(5, VOCAB, (BATCH, LENGTH), generator=generator)  # 0-4: special ids
        ids[1, LENGTH - PAD:] = config.pad_token_id
        return ids, {}
    order = torch.randperm(len(WORDS), generator=generator).tolist()
    texts = [" ".join(WORDS[i] for i in order[:LENGTH - 2]),
             " ".join(WORDS[i] for i in order[LENGTH:2 * LENGTH - PAD - 2])]
    book = HashCodebook.for_model(config, Counter(w for t in texts for w in word_tokenize(t)))
    rows = book.encode(texts, max_len=LENGTH, add_special_tokens=True)
    ids = torch.tensor([row + [config.pad_token_id] * (LENGTH - len(row)) for row in rows])
    return ids, book.features(ids, embedding_features(config), config.embedding_options)


def batch_for(model: torch.nn.Module, head: str) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids, features = token_ids(model.config, generator)
    mask = (ids != model.config.pad_token_id).long()
    unlabelled = torch.full_like(ids, -100)
    if head == "mlm":  # every third real token scored, as if masked
        scored = mask.bool() & (torch.arange(LENGTH) % 3 == 0)
        return dict(input_ids=ids, attention_mask=mask, labels=torch.where(scored, ids, unlabelled),
                    **features)
    if head == "shuffle_random":
        classes = torch.randint(0, 3, ids.shape, generator=generator)
        return dict(input_ids=ids, attention_mask=mask, labels=torch.where(mask.bool(), classes, unlabelled),
                    **features)
    if head == "causal_lm":
        return dict(input_ids=ids, attention_mask=mask, labels=torch.where(mask.bool(), ids, unlabelled))
    if head == "seq2seq":
        target = torch.randint(5, VOCAB, (BATCH, LENGTH - PAD), generator=generator)
        target[1, -PAD:] = model.config.pad_token_id
        labels = torch.where(target != model.config.pad_token_id, target, -100)
        return dict(input_ids=ids, attention_mask=mask, decoder_input_ids=target, labels=labels)
    raise AssertionError(f"model_cases has no batch for model head {head!r}: add one to batch_for")
