"""``leanlm export-hf`` refuses what transformers cannot express and never leaves a half or wrong export:
the hash-embedding BERT of issue 26, every field of every target, every model of the matrix."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from export_cases import REMOTE_VARIANTS, VARIANTS, end_of_text_bpe, save_run, wordpiece
from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from model_cases import build, distinct_models

ROOT = Path(__file__).resolve().parents[1]


def cli_export(checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}
    return subprocess.run([sys.executable, "-m", "leanlm.cli", "export-hf", str(checkpoint), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("head", ["shuffle_random", "mlm"])
def test_a_hash_embedding_model_whose_run_cannot_be_read_is_refused_and_nothing_is_written(tmp_path, head):
    # ch2_hashformers-lsh_proj (a Shuffle+Random model): once exported with exit 0 as a stock BERT whose
    # embedding transformers initialised at random. The hash embedding and the S+R head now export
    # (tests/test_export_hash.py, test_export_shuffle_random.py); a run whose tokenizer setting cannot be read
    # is not guessed.
    fields = dict(backbone="bert", embedding="hash_proj", embedding_options={"hash": "lsh", "bits": 16})
    save_run(tmp_path / "ckpt", fields, head, wordpiece())
    done = cli_export(tmp_path / "ckpt", tmp_path / "hf")
    assert done.returncode == 2
    assert "needs to know whether its run hashed words or subword pieces" in done.stderr, done.stderr
    assert not (tmp_path / "hf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no staging folder left behind


def test_a_head_without_a_class_is_refused_through_the_cli_as_the_docs_show(tmp_path):
    save_run(tmp_path / "ckpt", dict(backbone="bert"), "qa", wordpiece())
    done = cli_export(tmp_path / "ckpt", tmp_path / "hf")
    assert done.returncode == 2 and not (tmp_path / "hf").exists()
    # docs/export.md shows this very message for a question-answering checkpoint
    shown = (ROOT / "docs" / "export.md").read_text(encoding="utf-8").split("leanlm export-hf: error:")[1]
    shown = " ".join(shown.split("```")[0].split())
    said = done.stderr.strip().split("leanlm export-hf: error: ", 1)[1]
    assert said.replace(str(tmp_path / "ckpt"), "CHECKPOINT") == shown


@pytest.mark.parametrize("fields, head, says", [
    (dict(backbone="bert"), "multiple_choice", "'multiple_choice' model of backbone 'bert' has no stock "
                                               "transformers class nor one in leanlm's own code"),
    (dict(backbone="bert"), "qa", "'qa' model of backbone 'bert' has no stock"),
])
def test_what_transformers_cannot_express_is_refused_by_field(tmp_path, fields, head, says):
    from leanlm.export import export_hf

    tokenizer = end_of_text_bpe() if fields["backbone"] != "bert" else wordpiece()
    save_run(tmp_path / "ckpt", fields, head, tokenizer)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_every_target_classifies_every_config_field():
    # A field added to ModelConfig refuses every export until someone says whether transformers expresses it.
    from leanlm.export.remote import REMOTE_TARGETS
    from leanlm.modeling.hf_layout import QK_NORM_TARGETS, TARGETS

    names = {f.name for f in dataclasses.fields(ModelConfig)}
    for target in [*TARGETS.values(), *QK_NORM_TARGETS.values(), *REMOTE_TARGETS.values()]:
        assert target.classified() == names, (target.family, names ^ target.classified())
        assert not set(target.carried) & set(target.unused) & set(target.pinned)


def test_an_unclassified_field_is_refused(monkeypatch):
    from leanlm.modeling.hf_layout import TARGETS, target_of

    bert = TARGETS["bert"]
    monkeypatch.setitem(TARGETS, "bert", dataclasses.replace(bert, unused=bert.unused - {"rope_theta"}))
    config = ModelConfig(vocab_size=100, **{k: v for k, v in VARIANTS["bert-mlm"][0].items()},
                         n_layers=1, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=16)
    with pytest.raises(ConfigError, match="rope_theta=10000.0: the BERT export does not know"):
        target_of(config, "mlm", "here")


def test_an_existing_output_folder_is_not_written_into(tmp_path):
    from leanlm.export import export_hf

    save_run(tmp_path / "ckpt", *VARIANTS["bert-mlm"][:2], wordpiece())
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="already exists and is not an empty folder"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["mine.txt"]


def test_a_failed_check_publishes_nothing(tmp_path, monkeypatch):
    # A wrong layout map (here: one weight perturbed after mapping) fails the export's own logits check.
    from leanlm.errors import LeanLMError
    from leanlm.export import export_hf
    from leanlm.modeling.hf_layout import TARGETS

    bert = TARGETS["bert"]

    def wrong(model, where):
        config, tensors = bert.build(model, where)
        key = "bert.encoder.layer.0.intermediate.dense.weight"
        return config, {**tensors, key: tensors[key] * 1.5}

    monkeypatch.setitem(TARGETS, "bert", dataclasses.replace(bert, build=wrong))
    save_run(tmp_path / "ckpt", *VARIANTS["bert-mlm"][:2], wordpiece())
    with pytest.raises(LeanLMError, match="computes other logits than leanlm"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_the_tokenizer_must_fit_the_model(tmp_path):
    from leanlm.errors import DataError
    from leanlm.export import export_hf
    from leanlm.training.run_tokenizer import save_run_tokenizer

    save_run(tmp_path / "ckpt", *VARIANTS["bert-mlm"][:2], wordpiece())
    save_run_tokenizer(end_of_text_bpe(), tmp_path / "ckpt", keep=True)  # 300 tokens, a 150-row model
    with pytest.raises(DataError, match="it is not the tokenizer the model was trained with"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")


MATRIX = distinct_models()


def word_level(size: int, specials: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")):
    """A tokenizer of exactly ``size`` tokens with BERT's special tokens (the matrix's models' vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate([*specials, *(f"w{i}" for i in range(size - len(specials)))])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=specials[1]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_model_of_the_matrix_exports_or_is_refused_by_name(case, tmp_path):
    # Exported: transformers computes its logits (the export's own check; the fresh-process round trips
    # of each variant are tests/test_export_hf_roundtrip.py). Refused: by the field, head or backbone.
    from leanlm.export import export_hf
    from leanlm.export.hf import export_target
    from leanlm.modeling.checkpoint import save_checkpoint
    from leanlm.training.run_tokenizer import save_run_tokenizer

    from export_cases import HASH_EMBEDDINGS, SHUFFLE_RANDOM_RUNS
    from leanlm.export.remote.hash_inputs import reads_features

    fields, head = MATRIX[case]
    model = build(fields, head)
    try:
        export_target(model.config, head, case)
    except ConfigError as err:
        assert str(err).startswith(f"{case}: ") and ("cannot be exported" in str(err) or "no stock" in str(err))
        return
    if reads_features(model.config):  # exported from text, with its run's codebook: tests/test_export_hash.py
        kind = (model.config.embedding, model.config.embedding_options.get("hash"))
        assert (model.config.embedding, head) in HASH_EMBEDDINGS or (head == "shuffle_random" and kind in {
            (f.get("embedding"), (f.get("embedding_options") or {}).get("hash"))
            for f, _ in filter(None, map(MATRIX.get, SHUFFLE_RANDOM_RUNS))}), case
        return
    assert (model.config.backbone, head) in {(f["backbone"], h) for f, h, _ in
                                             [*VARIANTS.values(), *REMOTE_VARIANTS.values()]} | {
        ("bert", "shuffle_random"), ("transformer", "seq2seq")}  # tests/test_export_shuffle_random.py, _seq2seq.py
    save_checkpoint(model, model.config, tmp_path / "ckpt", extra={"run_id": case})
    from leanlm.training.translation_pairs import SPECIAL_TOKENS  # the translation BPE's <pad> <unk> <s> </s>

    save_run_tokenizer(word_level(model.config.vocab_size, *([SPECIAL_TOKENS] if head == "seq2seq" else [])),
                       tmp_path / "ckpt", keep=True)
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
