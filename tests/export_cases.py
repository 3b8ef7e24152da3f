"""Tiny leanlm checkpoints saved the way pretraining saves them (leanlm.stages.pretrain: ``save_checkpoint``
with ``extra`` run id and profile, the run's ``tokenizer.json`` beside), for the export tests, and the
fresh-process harness in which ``transformers`` loads an export with leanlm not importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from leanlm.data.tokenizer import train_wordpiece
from leanlm.modeling.checkpoint import save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.modeling.attention import ATTENTION
from leanlm.modeling.mixers import MIXERS
from leanlm.routes.fixed_text import needs_fixed_text
from leanlm.training.run_tokenizer import save_run_tokenizer

TEXTS = ["the cat sat on the mat.", "a dog ran in the park, fast!", "hello world: this is leanlm",
         "models in transformers' layout load anywhere", "padding rows never reach a logit"] * 8
SIZES = dict(n_layers=2, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=32, dropout=0.0,
             attention_dropout=0.0)


def wordpiece() -> Tokenizer:
    """A BERT-style WordPiece (leanlm's own trainer): [PAD]=0 [UNK] [CLS] [SEP] [MASK]."""
    return train_wordpiece(lambda: iter(TEXTS), 150, lowercase=True)


def end_of_text_bpe() -> Tokenizer:
    """A byte-level BPE whose only special token is <|endoftext|>, as GPT-2's and Pythia's (ch. 4)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizer


# name -> (model fields, head, tokenizer): every variant with a stock transformers class.
VARIANTS = {
    "bert-mlm": (dict(backbone="bert"), "mlm", wordpiece),
    "bert-classification": (dict(backbone="bert"), "classification", wordpiece),
    "gpt2-causal_lm": (dict(backbone="gpt2", type_vocab_size=0, layer_norm_eps=1e-5), "causal_lm", end_of_text_bpe),
    "gpt2-causal_lm-untied": (dict(backbone="gpt2", type_vocab_size=0, tie_word_embeddings=False), "causal_lm",
                              end_of_text_bpe),
    "gpt2-classification": (dict(backbone="gpt2", type_vocab_size=0), "classification", end_of_text_bpe),
    "qwen-standard": (dict(backbone="qwen", type_vocab_size=0, attention="standard", layer_norm_eps=1e-6,
                           rope_theta=1e6), "causal_lm", end_of_text_bpe),
    "qwen-standard-gqa-untied": (dict(backbone="qwen", type_vocab_size=0, attention="standard", n_kv_heads=2,
                                      tie_word_embeddings=False, layout="hybrid"), "causal_lm", end_of_text_bpe),
    "qwen-standard-qk_norm": (dict(backbone="qwen", type_vocab_size=0, attention="standard", qk_norm=True,
                                   n_kv_heads=2), "causal_lm", end_of_text_bpe),
}
QWEN = dict(backbone="qwen", type_vocab_size=0, layer_norm_eps=1e-6, rope_theta=1e6)
# name -> (model fields, head, tokenizer): every variant that exports with its own code (trust_remote_code):
# each ch. 4 mixer of the registry in the uniform and hybrid layouts (GQA where the mixer takes it), and the
# settings that change a mixer's code path (q/k norms, tied head, another layout).
REMOTE_VARIANTS = {
    f"qwen-{name}-{layout}": (dict(QWEN, attention=name, layout=layout, tie_word_embeddings=False,
                                   **({"n_kv_heads": 2} if "n_kv_heads" in MIXERS.get(name).options
                                      or layout != "uniform" else {})), "causal_lm", end_of_text_bpe)
    for name in MIXERS.names() if name != "standard" for layout in ("uniform", "hybrid")
}
REMOTE_VARIANTS.update({
    "qwen-non_approximate-qk_norm-tied": (dict(QWEN, attention="non_approximate", qk_norm=True), "causal_lm",
                                          end_of_text_bpe),
    "qwen-rnd_emb_qk-qk_norm-bilateral": (dict(QWEN, attention="rnd_emb_qk", qk_norm=True, layout="bilateral",
                                               n_layers=3), "causal_lm", end_of_text_bpe),
    "qwen-static_emb_qk-tied-odd": (dict(QWEN, attention="static_emb_qk", layout="odd"), "causal_lm",
                                    end_of_text_bpe),
})
# Ch. 3: each attention variant of the registry other than MHA in the BERT encoder (MLM) and the GPT-2 decoder
# (all but FNet, which has no causal form), the classifiers, and what stock BERT cannot number.
GPT2 = dict(backbone="gpt2", type_vocab_size=0)
for name in ATTENTION.names():
    options = {"n_kv_heads": 2} if "n_kv_heads" in ATTENTION.get(name).options else {}
    if name != "mha":
        REMOTE_VARIANTS[f"bert-{name}-mlm"] = (dict(backbone="bert", attention=name, **options), "mlm", wordpiece)
    if name not in ("mha", "fnet"):
        REMOTE_VARIANTS[f"gpt2-{name}-causal_lm"] = (dict(GPT2, attention=name, **options), "causal_lm",
                                                     end_of_text_bpe)
REMOTE_VARIANTS.update({
    "bert-mhe_mul-classification": (dict(backbone="bert", attention="mhe_mul"), "classification", wordpiece),
    "bert-linear-classification": (dict(backbone="bert", attention="linear"), "classification", wordpiece),
    "gpt2-mhe_add-classification": (dict(GPT2, attention="mhe_add"), "classification", end_of_text_bpe),
    "gpt2-sha-causal_lm-untied": (dict(GPT2, attention="sha", tie_word_embeddings=False), "causal_lm",
                                  end_of_text_bpe),
    "bert-mha-sinusoidal-offset-no_types": (dict(backbone="bert", positions="sinusoidal", position_offset=2,
                                                 type_vocab_size=0, max_position=34), "mlm", wordpiece),
})
# Ch. 2's embeddings on BERT (tests/test_export_hash.py): name -> (model fields, head, the run of params/smoke.yaml
# whose tokenizer setting, words or pieces, the export reads). Every embedding of the registry, MD5 and LSH.
WORDS, PIECES = "ch2_hashformers-md5_proj", "ch2_subword-md5_proj"
HASH_VARIANTS = {
    "md5_emb-words": (dict(embedding="hash_emb", embedding_options={"hash": "md5", "buckets": 97}),
                      "classification", WORDS),
    "md5_pool-words": (dict(embedding="hash_pool", embedding_options={"hash": "md5", "bits": 24, "k": 5}),
                       "classification", WORDS),
    "md5_add-words": (dict(embedding="hash_add", embedding_options={"hash": "md5", "scale": "mean"}),
                      "classification", WORDS),
    "md5_proj-words": (dict(embedding="hash_proj", embedding_options={"hash": "md5"}), "classification", WORDS),
    "lsh_emb-words": (dict(embedding="hash_emb", embedding_options={"hash": "lsh", "buckets": 61}),
                      "classification", WORDS),
    "lsh_pool-words": (dict(embedding="hash_pool", embedding_options={"hash": "lsh", "bits": 30, "k": 7}),
                       "classification", WORDS),
    "lsh_proj-words": (dict(embedding="hash_proj", embedding_options={"hash": "lsh", "bits": 64}),
                       "classification", WORDS),
    "proformer-words": (dict(embedding="proformer", embedding_options={"bits": 40}, positions="sinusoidal",
                             type_vocab_size=0), "classification", WORDS),
    "md5_emb-pieces": (dict(embedding="hash_emb", embedding_options={"hash": "md5", "buckets": "1K"}),
                       "classification", PIECES),
    "lsh_proj-pieces": (dict(embedding="hash_proj", embedding_options={"hash": "lsh", "bits": 32}),
                        "classification", PIECES),
    "lsh_emb-pieces-mlm": (dict(embedding="hash_emb", embedding_options={"hash": "lsh", "buckets": 50}), "mlm",
                           PIECES),
    "eelbert-mlm": (dict(embedding="eelbert", embedding_options={"ngram": 3, "max_chars": 6}), "mlm",
                    "ch2_related-eelbert"),
    "eelbert-classification": (dict(embedding="eelbert"), "classification", "ch2_related-eelbert"),
    "bert_hash-mlm": (dict(embedding="bert_hash", embedding_options={"projections": 3}), "mlm",
                      "ch2_related-bert_hash_femto"),
}

# name -> (run of params/smoke.yaml, its S+R head): the pretrained checkpoints of ch. 2, and the official code's
# head (dropout + linear) on a stock backbone (BERT's own token classifier) and on a hash embedding.
SHUFFLE_RANDOM_CASES = {
    "bert_sr": ("ch2_hashformers-bert_sr", "bert"),
    "bert_sr-official": ("ch2_hashformers-bert_sr", "official_code"),
    "md5_emb_1k": ("ch2_hashformers-md5_emb_1k", "bert"),
    "md5_pool": ("ch2_hashformers-md5_pool", "bert"),
    "md5_add-official": ("ch2_hashformers-md5_add", "official_code"),
    "md5_proj": ("ch2_hashformers-md5_proj", "bert"),
    "lsh_emb_50k": ("ch2_hashformers-lsh_emb_50k", "bert"),
    "lsh_pool": ("ch2_hashformers-lsh_pool", "bert"),
    "lsh_add": ("ch2_hashformers-lsh_add", "bert"),
    "lsh_proj": ("ch2_hashformers-lsh_proj", "bert"),
    "subword-lsh_proj": ("ch2_subword-lsh_proj", "bert"),
    "proformer": ("ch2_hashformers-proformer", "bert"),
}
HASH_EMBEDDINGS = {(fields["embedding"], head) for fields, head, _ in HASH_VARIANTS.values()}
# The ch. 2 S+R runs tests/test_export_shuffle_random.py exports (their embeddings read from the profile there).
SHUFFLE_RANDOM_RUNS = {run_id for run_id, _ in SHUFFLE_RANDOM_CASES.values()}
HF_CLASSES = {"mlm": "AutoModelForMaskedLM", "classification": "AutoModelForSequenceClassification",
              "causal_lm": "AutoModelForCausalLM"}


def trained_like(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every weight moved off its init (biases, norms), so a map that dropped or swapped one shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def save_run(directory: Path, fields: dict, head: str, tokenizer: Tokenizer, run_id: str = "test-run"):
    """A checkpoint as pretraining writes it; returns the (eval-mode) model."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    config = ModelConfig(**{**SIZES, "vocab_size": vocab, **fields})
    assert config.vocab_rows > config.vocab_size  # the padded rows exist and must stay behind
    kwargs = {"num_labels": 3} if head == "classification" else {}
    model = trained_like(build_model(config, head, **kwargs))
    if needs_fixed_text(model):  # FixedSeqQK's fixed text (a held-out document in the pipeline)
        model.set_fixed_sequence(torch.arange(config.max_position) % vocab)
    save_checkpoint(model, config, directory, extra={"run_id": run_id, "profile": "nowhere"})
    save_run_tokenizer(tokenizer, directory, keep=True)
    return model


def save_hash_run(directory: Path, fields: dict, head: str, run_id: str, pieces: bool | None = None,
                  **head_options):
    """A hash run's checkpoint as pretraining saves it: weights, the codebook's hasher (``codebook/``), and for
    a run that hashes pieces (default: every run but WORDS) or reads ids, its subword tokenizer; returns (model,
    leanlm's tokenizer of the run). ``head_options``: the head's (Shuffle+Random's ``head_type``)."""
    from leanlm.hashing.codebook import HashCodebook
    from leanlm.hashing.inputs import CodebookTokenizer, PieceCodebookTokenizer, corpus_token_counts, save_inputs
    from leanlm.modeling.checkpoint import save_checkpoint
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.hash_features import codebook_settings
    from leanlm.modeling.models import build_model
    from leanlm.training.run_tokenizer import save_run_tokenizer

    pieces = wordpiece() if (run_id != WORDS if pieces is None else pieces) else None
    config = ModelConfig(**{**SIZES, "backbone": "bert", "vocab_size": 150 if pieces else 90, **fields})
    model = trained_like(build_model(config, head, **({"num_labels": 3} if head == "classification" else {}),
                                     **head_options))
    if hasattr(model.encoder.embeddings.word_embeddings, "hash_seeds"):  # a buffer: moved off zero by leanlm
        assert bool(model.encoder.embeddings.word_embeddings.hash_seeds.any())
    save_checkpoint(model, config, directory, extra={"run_id": run_id, "profile": "smoke"})
    if pieces is not None:
        save_run_tokenizer(pieces, directory, keep=True)
    if codebook_settings(config) is None:  # BERT-Hash reads ids: the run's subword tokenizer is its input
        return model, pieces
    book = HashCodebook.for_model(config, token_counts=corpus_token_counts(TEXTS, pieces))
    ours = CodebookTokenizer(book) if pieces is None else PieceCodebookTokenizer(pieces, book)
    ours.encode_batch(TEXTS)  # the rows pretraining met (not saved: the export numbers its own)
    save_inputs(ours, directory)
    return model, ours


def leanlm_logits(model, tokenizer, texts):
    from leanlm.hashing.inputs import feature_hook

    encodings = tokenizer.encode_batch(texts) if not isinstance(texts, tuple) else tokenizer.encode_batch(list(zip(*texts)))
    width = max(len(e.ids) for e in encodings)
    pad = lambda rows: torch.tensor([r + [0] * (width - len(r)) for r in rows])  # noqa: E731
    batch = {"input_ids": pad([e.ids for e in encodings]), "token_type_ids": pad([e.type_ids for e in encodings]),
             "attention_mask": pad([[1] * len(e.ids) for e in encodings])}
    hook = feature_hook(model.config, tokenizer)
    if hook is not None:
        batch.update(hook(batch["input_ids"]))
    with torch.no_grad():
        return model(**batch)["logits"], batch


# Prepended to every fresh-process script: leanlm cannot be imported there (it is installed editable in
# the venv, so -I alone does not hide it), and the workflow folder is off sys.path.
NO_LEANLM = textwrap.dedent("""
    import sys
    sys.path[:] = [p for p in sys.path if "workflow" not in p]
    class _NoLeanLM:
        def find_spec(self, name, path=None, target=None):
            if name == "leanlm" or name.startswith("leanlm."):
                raise ImportError("leanlm is not importable in this process")
    sys.meta_path.insert(0, _NoLeanLM())
    try:
        import leanlm
    except ImportError:
        pass
    else:
        raise SystemExit("leanlm is importable in the fresh process")
""")


def run_fresh(script: str, cwd: Path, payload: dict) -> dict:
    """Run ``script`` in a fresh ``python -I`` (no PYTHONPATH, cwd ``cwd``, leanlm not importable) with
    ``payload`` as the JSON in ``sys.argv[1]``; returns the JSON it prints last."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LEANLM_ROOT")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-I", "-c", NO_LEANLM + textwrap.dedent(script), json.dumps(payload)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
