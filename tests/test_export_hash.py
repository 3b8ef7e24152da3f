"""Ch. 2's hash embeddings export with what computes their inputs from text: in a fresh process where leanlm
is not importable, ``AutoTokenizer`` + ``AutoModelFor*`` (``trust_remote_code``) take text to leanlm's logits,
for every embedding of the registry, words and subword pieces, MD5 and LSH (leanlm.export.remote.hash_inputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from export_cases import HASH_VARIANTS, HF_CLASSES, WORDS, leanlm_logits, run_fresh, save_hash_run, wordpiece
from leanlm.errors import ConfigError, DataError

TEMPLATES = Path(__file__).resolve().parents[1] / "workflow" / "leanlm" / "export" / "remote"
# Words and pieces the codebooks never met, punctuation runs, special tokens inside the text, a pair.
SINGLES = ["The cat sat on the mat.", "Unseen words: zyzzyva, quokka!! [MASK] and [UNK]", "a"]
PAIRS = (["a dog ran in the park", "Hello there"], ["fast, faster, fastest.", "hashing [SEP] pieces"])
LOAD = """
import json, sys
import torch
import transformers
job = json.loads(sys.argv[1])
out = {}
for name, spec in job.items():
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"], trust_remote_code=True)
    model = getattr(transformers, spec["auto"]).from_pretrained(spec["dir"], trust_remote_code=True).eval()
    out[name] = {"tokenizer": type(tokenizer).__name__, "model": type(model).__name__}
    for part, texts in spec["inputs"].items():
        batch = tokenizer(*texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out[name][part] = {"logits": model(**batch).logits.tolist(), "ids": batch["input_ids"].tolist()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Every hash variant exported, then all loaded in one fresh process: ``{name: (leanlm's, theirs)}``."""
    from leanlm.export import export_hf
    from leanlm.hashing.codebook import HashCodebook
    from leanlm.hashing.inputs import CodebookTokenizer, PieceCodebookTokenizer

    root = tmp_path_factory.mktemp("hash")
    ours, job = {}, {}
    for name, (fields, head, run_id) in HASH_VARIANTS.items():
        model, tokenizer = save_hash_run(root / name / "ckpt", fields, head, run_id)
        export_hf(root / name / "ckpt", root / name / "hf")
        if isinstance(tokenizer, CodebookTokenizer):  # fine-tuning's tokenizer: the saved codebook, as leanlm loads it
            book = HashCodebook.load(root / name / "ckpt" / "codebook")
            tokenizer = (PieceCodebookTokenizer(wordpiece(), book) if isinstance(tokenizer, PieceCodebookTokenizer)
                         else CodebookTokenizer(book))
        inputs = {"singles": [SINGLES], "pairs": list(PAIRS)}
        ours[name] = {"head": head, "pieces": run_id != WORDS}
        for part, texts in inputs.items():
            ours[name][part] = leanlm_logits(model, tokenizer, texts[0] if part == "singles" else PAIRS)
        job[name] = {"dir": str(root / name / "hf"), "auto": HF_CLASSES[head], "inputs": inputs}
    theirs = run_fresh(LOAD, root, job)
    return {name: (ours[name], theirs[name]) for name in job}, root


@pytest.mark.parametrize("name", sorted(HASH_VARIANTS))
def test_text_to_logits_in_transformers_equals_leanlm(round_trips, name):
    ours, theirs = round_trips[0][name]
    for part in ("singles", "pairs"):
        logits, batch = ours[part]
        theirs_logits = torch.tensor(theirs[part]["logits"])
        assert theirs_logits.shape == logits.shape
        if ours["head"] == "classification":
            torch.testing.assert_close(theirs_logits, logits, atol=1e-5, rtol=1e-4)
        else:
            real = batch["attention_mask"].bool()
            torch.testing.assert_close(theirs_logits[real], logits[real], atol=1e-5, rtol=1e-4)
        ids = torch.tensor(theirs[part]["ids"])
        if ours["pieces"]:  # a piece's row is fixed by its id: the very ids leanlm feeds the model
            assert torch.equal(ids, batch["input_ids"])
        else:  # words are numbered as met; the special rows and the layout are leanlm's
            assert torch.equal(ids < 5, batch["input_ids"] < 5) and torch.equal(ids.where(ids < 5, -1),
                                                                                 batch["input_ids"].where(ids < 5, -1))


def test_the_export_ships_its_tokenizer_and_the_templates(round_trips):
    root = round_trips[1]
    for name, (fields, head, run_id) in HASH_VARIANTS.items():
        out = root / name / "hf"
        config = json.loads((out / "config.json").read_text(encoding="utf-8"))
        assert config["embedding"] == fields["embedding"]
        shipped = ["configuration_leanlm.py", "modeling_leanlm_ch3.py", "modeling_leanlm_attention.py",
                   "modeling_leanlm_hash.py"]
        if fields["embedding"] != "bert_hash":
            shipped.append("tokenization_leanlm_hash.py")
            tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
            assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_leanlm_hash.LeanHashTokenizer"
            assert (out / "hash_pieces.json").is_file() == (run_id != WORDS)
            assert (out / "hash_codebook.safetensors").is_file() == ("lsh" in name or "proformer" in name)
        for code in shipped:
            assert (out / code).read_text(encoding="utf-8") == (TEMPLATES / code).read_text(encoding="utf-8")


def test_an_mlm_head_over_hashed_words_is_refused(tmp_path):
    from leanlm.export import export_hf

    save_hash_run(tmp_path / "ckpt", HASH_VARIANTS["md5_proj-words"][0], "mlm", WORDS)
    with pytest.raises(ConfigError, match="an MLM head over hashed words predicts rows of its pretraining codebook"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_hash_model_without_its_codebook_is_refused(tmp_path):
    import shutil

    from leanlm.export import export_hf

    save_hash_run(tmp_path / "ckpt", HASH_VARIANTS["md5_proj-words"][0], "classification", WORDS)
    shutil.rmtree(tmp_path / "ckpt" / "codebook")
    with pytest.raises(DataError, match="codebook is missing"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_embedding_the_template_does_not_implement_is_refused(tmp_path, monkeypatch):
    from leanlm.export import export_hf
    from leanlm.export.remote import modeling_leanlm_hash

    save_hash_run(tmp_path / "ckpt", HASH_VARIANTS["md5_proj-words"][0], "classification", WORDS)
    monkeypatch.delitem(modeling_leanlm_hash.EMBEDDINGS, "hash_proj")
    with pytest.raises(ConfigError, match="embedding='hash_proj' cannot be exported to transformers' "
                                          "LeanBertForSequenceClassification: modeling_leanlm_hash.py implements"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")


def test_the_tokenizer_template_imports_only_the_standard_library_torch_and_transformers_own_dependencies():
    import ast
    import sys

    tree = ast.parse((TEMPLATES / "tokenization_leanlm_hash.py").read_text(encoding="utf-8"))
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert roots - set(sys.stdlib_module_names) <= {"torch", "transformers", "tokenizers", "safetensors"}, roots


def test_a_stock_bert_tokenizer_gives_a_pairs_second_text_type_one(tmp_path):
    # BERT reads token types: the exported tokenizer must return them, as leanlm encodes a pair.
    from export_cases import VARIANTS, save_run
    from transformers import AutoTokenizer

    from leanlm.export import export_hf

    tokenizer = wordpiece()
    save_run(tmp_path / "ckpt", *VARIANTS["bert-classification"][:2], tokenizer)
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    batch = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))("the cat sat", "on the mat")
    assert batch["token_type_ids"] == tokenizer.encode("the cat sat", "on the mat").type_ids
    assert 1 in batch["token_type_ids"]
