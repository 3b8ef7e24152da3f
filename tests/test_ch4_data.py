"""Chapter 4's own pretraining data: SlimPajama and Pythia's BPE as a profile's named corpus and tokenizer.

Offline: SlimPajama is a local fixture in its hub schema (``text``, ``meta.redpajama_set_name``) streamed
with ``datasets`` through the hub code path (only the download is monkeypatched), and Pythia's tokenizer a
tiny byte-level BPE whose only special token is ``<|endoftext|>``, loaded through ``transformers`` like
the hub one. Then a tiny Qwen model is pretrained on them with ``leanlm pretrain`` in a scratch root and
evaluated (lm_eval, analysis, skip) with the tokenizer saved beside it.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path

import pytest
import yaml

from leanlm.config import _load_matrix_cached, load_config

from leanlm.data.sources import hub
from leanlm.data import pretrain_data as named_data
from leanlm.errors import ConfigError, DataError
from leanlm.runs import get_run, named_pretrain_data, runs
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)

REPO = Path(__file__).resolve().parents[1]
SETS = ["RedPajamaCommonCrawl", "RedPajamaC4", "RedPajamaGithub", "RedPajamaWikipedia"]
WORDS = ("river harbour market chapel orchard meadow bridge library windmill castle garden quarry village "
         "morning summer winter people visitors stones water light").split()


def _slimpajama_rows(n: int, seed: int = 0) -> list[dict]:
    """Rows in SlimPajama's hub schema; one GitHub row keeps its indentation, one row is empty."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        source = SETS[i % len(SETS)]
        if source == "RedPajamaGithub":
            text = f"def f{i}(x):\n    return x + {i}\n\n\nprint(f{i}(2))"
        else:
            text = " ".join(f"The {rng.choice(WORDS)} near the {rng.choice(WORDS)} was quiet." for _ in range(6))
        rows.append({"text": text, "meta": {"redpajama_set_name": source}})
    rows[3] = {"text": "", "meta": {"redpajama_set_name": "RedPajamaStackExchange"}}
    return rows


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pythia_like(directory: Path, texts: list[str]) -> Path:
    """A byte-level BPE with ``<|endoftext|>`` only, saved as a local hub-style tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 2048}))
    return directory


def _fixture_stream(path: Path, cache: Path):
    """What load_streaming_rows would stream from the hub, from the local fixture."""
    import datasets

    def load(name, spec, profile):
        return datasets.load_dataset("json", data_files=str(path), split="train", streaming=True,
                                     cache_dir=str(cache))

    return load


# ------------------------------------------------------------------------------------------ config
def test_paper_names_slimpajama_and_pythia_and_smoke_uses_its_own(scratch_root):
    paper = load_config("params/paper.yaml")
    assert paper["data"]["corpora"]["slimpajama"]["dataset"] == "cerebras/SlimPajama-627B"
    assert paper["data"]["tokenizers"]["pythia"] == {"kind": "hub", "name": "EleutherAI/pythia-160m",
                                                     "vocab_multiple": 128}
    assert named_data.embedding_rows(50277, 128) == 50304  # Pythia's rows, as Table 4.10 counts them
    # Ch. 2's BPE baselines and subword HashFormers name RoBERTa's BPE (tests/test_ch2_bpe.py); the rest of
    # chapters 2 and 3 pretrain on the profile's own data.
    bpe_runs = {"ch2_hashformers-bert_mlm", "ch2_hashformers-bert_sr"}
    for run in runs(paper):
        if run.experiment.startswith("ch4_"):
            expected = ("slimpajama", "pythia")
        elif run.run_id in bpe_runs or run.experiment == "ch2_subword":
            expected = ("", "roberta_bpe")
        else:
            expected = ("", "")
        assert (run.pretrain_corpus, run.pretrain_tokenizer) == expected, run.run_id
    run = get_run(paper, "ch4_uniform-standard")
    assert named_pretrain_data(paper, run) == {"corpus": {"slimpajama": paper["data"]["corpora"]["slimpajama"]},
                                               "tokenizer": {"pythia": paper["data"]["tokenizers"]["pythia"]}}
    data = named_data.run_data(paper, run)
    assert data.corpus_dir == scratch_root / "data" / "paper" / "corpora" / "slimpajama"
    assert data.tokenizer_dir == scratch_root / "data" / "paper" / "tokenizers" / "pythia" and data.vocab_multiple == 128
    assert named_pretrain_data(paper, get_run(paper, "ch3_decoder-mha")) == {}

    smoke = load_config("params/smoke.yaml")
    for run in runs(smoke):
        assert (run.pretrain_corpus, run.pretrain_tokenizer) == ("", ""), run.run_id
        assert named_pretrain_data(smoke, run) == {}
    data = named_data.run_data(smoke, get_run(smoke, "ch4_uniform-standard"))
    assert (data.corpus_dir, data.tokenizer_dir, data.vocab_multiple) == (
        scratch_root / "data" / "smoke" / "corpus", scratch_root / "data" / "smoke" / "tokenizer", 1)



def test_unknown_names_fail_naming_file_key_and_allowed_names(scratch_root):
    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_gqa"].update(pretrain_data={"corpus": "slimpajam", "tokenizer": "pythia"}))
    with pytest.raises(ConfigError) as err:
        load_config("params/paper.yaml")
    message = str(err.value)
    assert "params/experiments/ch4.yaml (experiment 'ch4_gqa'" in message
    assert "pretrain_data.corpus = 'slimpajam'" in message and "data.corpora" in message
    assert "allowed: 'slimpajama'" in message and "paper.yaml" in message
    load_config("params/smoke.yaml")  # a profile that defines no corpora pretrains on its own

    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_gqa"]["runs"]["standard"].update(pretrain_data={"corpus": "slimpajama", "tokenizer": "gpt2"}))
    with pytest.raises(ConfigError, match=r"run 'standard'.*pretrain_data.tokenizer = 'gpt2'.*allowed: 'pythia'"):
        load_config("params/paper.yaml")


def test_named_data_is_used_only_where_it_can_be_honoured(scratch_root):
    edit_yaml(scratch_root / "params/experiments/ch3.yaml",
              lambda d: d["ch3_decoder"].update(pretrain_data={"tokenizer": "pythia"}))
    with pytest.raises(ConfigError, match=r"ch3\.yaml.*pretrain_data.tokenizer is read back.*families glue"):
        load_config("params/smoke.yaml")
    edit_yaml(scratch_root / "params/experiments/ch3.yaml", lambda d: d["ch3_decoder"].update(pretrain_data={"corpus": "x"}))
    load_config("params/smoke.yaml")  # a named corpus alone keeps the profile's tokenizer: any family
    edit_yaml(scratch_root / "params/experiments/ch3.yaml", lambda d: d["ch3_encdec"].update(pretrain_data={"corpus": "x"}))
    with pytest.raises(ConfigError, match="pretrain_data needs an objective that pretrains on the packed corpus"):
        load_config("params/smoke.yaml")


def test_evaluated_runs_share_their_models_data(scratch_root):
    edit_yaml(scratch_root / "params/experiments/ch4.yaml",
              lambda d: d["ch4_skip"]["runs"]["mlp"].update(pretrain_data={"tokenizer": "other"}))
    edit_yaml(scratch_root / "params/paper.yaml",
              lambda d: d["data"]["tokenizers"].update(other={"kind": "hub", "name": "EleutherAI/pythia-70m"}))
    with pytest.raises(ConfigError, match="ch4_skip-mlp evaluates ch4_hybrid-mlp's model but names other pretraining"):
        load_config("params/paper.yaml")


def test_profile_schema_checks_the_named_settings(scratch_root):
    edit_yaml(scratch_root / "params/paper.yaml", lambda d: d["data"]["corpora"]["slimpajama"].update(max_docs=5))
    with pytest.raises(ConfigError, match=r"data\.corpora\.slimpajama.*max_docs"):
        load_config("params/paper.yaml")


def test_dvc_runs_the_named_stages_for_the_profiles_that_name_data(scratch_root, tmp_path):
    paper = load_config("params/paper.yaml")
    named_data.check_dvc_stages(paper, REPO / "dvc.yaml")
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    for kind in named_data.NAMED_KINDS:
        stage = dvc["stages"][kind]
        assert stage["foreach"] == "${staged_named}"  # the named-data profiles staged here (dvc_profiles.register)
        assert sorted(stage["do"]["deps"]) == sorted(f"workflow/leanlm/{m}.py" for m in named_data.STAGE_CODE[kind])
        assert stage["do"]["outs"] == [f"data/${{item}}/{kind}"]
    other = tmp_path / "dvc.yaml"
    other.write_text(yaml.safe_dump({"vars": [{"profiles": ["paper"]}, {"named_data_profiles": []}]}))
    with pytest.raises(ConfigError, match="named_data_profiles.*does not list profile 'paper'"):
        named_data.check_dvc_stages(paper, other)
    named_data.check_dvc_stages(load_config("params/smoke.yaml"), other)  # smoke names nothing


# ------------------------------------------------------------------------------------------ data stages
def test_slimpajama_rows_become_documents_verbatim():
    rows = _slimpajama_rows(8)
    docs = list(named_data.hub_documents(rows, "slimpajama", "text", "meta.redpajama_set_name"))
    assert [d.doc_id for d in docs] == [f"slimpajama:{i}" for i in range(8)]
    assert [d.source for d in docs] == [r["meta"]["redpajama_set_name"] for r in rows]
    assert docs[2].text == rows[2]["text"] and "\n    return x + 2\n\n\n" in docs[2].text  # code keeps its layout
    assert [d.source for d in named_data.hub_documents(rows[:1], "sp", "text")] == ["sp"]
    with pytest.raises(DataError, match=r"no column 'content'.*data\.corpora\.sp\.text_field"):
        list(named_data.hub_documents(rows, "sp", "content"))


def test_named_stages_fail_fast_offline(scratch_root, monkeypatch):
    import socket

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_reachable", False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("must not try the network"))
    config = load_config("params/paper.yaml")
    with pytest.raises(DataError, match=r"corpus slimpajama: cerebras/SlimPajama-627B.*unreachable.*HF_HUB_OFFLINE"):
        named_data.run_named_stage("corpora", config)
    with pytest.raises(DataError, match=r"tokenizer EleutherAI/pythia-160m.*unreachable"):
        named_data.run_named_stage("tokenizers", config)
    assert not (scratch_root / "data" / "paper").exists() or not any((scratch_root / "data" / "paper").iterdir())


def test_named_stages_write_corpus_and_tokenizer(scratch_root, tmp_path, monkeypatch):
    fixture = _write_rows(tmp_path / "slimpajama.jsonl", _slimpajama_rows(40))
    tokenizer_source = _pythia_like(tmp_path / "pythia", [r["text"] for r in _slimpajama_rows(40)])
    monkeypatch.setattr(named_data, "load_streaming_rows", _fixture_stream(fixture, tmp_path / "hf"))
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)

    def tiny(doc):
        doc["data"]["corpora"]["slimpajama"].update(max_documents=30, validation_fraction=0.2, test_fraction=0.2)
        doc["data"]["tokenizers"]["pythia"]["name"] = str(tokenizer_source)
        doc["data"]["tokenizers"]["roberta_bpe"]["name"] = str(tokenizer_source)  # offline: no hub RoBERTa

    edit_yaml(scratch_root / "params/paper.yaml", tiny)
    config = load_config("params/paper.yaml")
    from leanlm.data.plumbing.stages import run_stage

    run_stage("corpora", config)  # the stage entry point DVC's command reaches
    corpus = scratch_root / "data" / "paper" / "corpora" / "slimpajama"
    stats = json.loads((corpus / "STATS.json").read_text())
    assert stats["total"]["documents"] == 29 and stats["dropped"] == {"empty": 1, "duplicate": 0}  # first 30 rows
    assert stats["by_source"]["RedPajamaGithub"]["documents"] == 7
    digests = json.loads((corpus / "DIGESTS.json").read_text())
    from leanlm.io import sha256_file
    from leanlm.training.token_cache import split_digest

    for split in ("train", "validation", "test"):
        assert digests[f"{split}.jsonl"]["sha256"] == sha256_file(corpus / f"{split}.jsonl")
        assert split_digest(corpus / f"{split}.jsonl") == digests[f"{split}.jsonl"]["sha256"]
    assert json.loads((corpus.parent / "MANIFEST.json").read_text())["corpora"]["slimpajama"]["max_documents"] == 30

    from leanlm.cli import main

    assert main(["data", "tokenizers", "--params", "params/paper.yaml"]) == 0  # DVC's command
    saved = scratch_root / "data" / "paper" / "tokenizers" / "pythia"
    meta = json.loads((saved / "META.json").read_text())
    assert meta["special_token_ids"] == {"eos": 0} and meta["vocab_size"] == 300 and meta["embedding_rows"] == 384
    written, source = (json.loads((d / "tokenizer.json").read_text()) for d in (saved, tokenizer_source))
    written.pop("post_processor"), source.pop("post_processor")  # transformers adds a no-op template
    assert written == source


# ------------------------------------------------------------------------------------------ packing
def test_eos_packing_in_memory_and_streamed(tmp_path, monkeypatch):
    from tokenizers import Tokenizer

    from leanlm.training.eos_packing import StreamRows, eos_packed_rows, pack_with_eos

    assert pack_with_eos([[1, 2, 3], [], [4, 5]], 3, eos_id=0).tolist() == [[0, 1, 2], [3, 0, 4]]  # tail 5 dropped
    assert pack_with_eos([[1]], 3, eos_id=0).shape == (0, 3)

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    texts = [r["text"] for r in _slimpajama_rows(20)]
    tok = Tokenizer.from_file(str(_pythia_like(tmp_path / "tok", texts) / "tokenizer.json"))
    split = _write_rows(tmp_path / "train.jsonl", [{"doc_id": str(i), "text": t} for i, t in enumerate(texts)])
    rows = eos_packed_rows(tok, split, 16, 0, "t")
    expected = pack_with_eos([tok.encode(t, add_special_tokens=False).ids for t in texts], 16, 0)
    assert isinstance(rows, StreamRows) and len(rows) == len(expected) > 5
    assert rows[:].tolist() == expected.tolist() and rows[:].dtype == expected.dtype
    import torch

    assert rows[torch.tensor([3, 0])].tolist() == expected[[3, 0]].tolist()
    (stream,) = (tmp_path / "cache" / "tokenized").glob("*.eos.uint16")
    tokens = sum(1 + len(tok.encode(t, add_special_tokens=False).ids) for t in texts if t)  # EOS + the document
    assert stream.stat().st_size == 2 * tokens  # one uint16 per token
    from leanlm.training import eos_packing

    monkeypatch.setattr(eos_packing, "_write_stream", lambda *a, **k: pytest.fail("tokenised again"))
    assert eos_packed_rows(tok, split, 16, 0, "t")[:].tolist() == expected.tolist()
    with pytest.raises(DataError, match="no full sequence of 100000 tokens"):
        eos_packed_rows(tok, split, 100000, 0, "t")


# ------------------------------------------------------------------------------------------ end to end
TINY = """
profile: tiny
source: packaged
experiments: [ch4_hybrid, ch4_skip]
seeds: [0]
data:
  corpus: {validation_fraction: 0.1, test_fraction: 0.1, split_seed: 1}
  tokenizer: {kind: wordpiece, vocab_size: 300, lowercase: true}
  tasks: {max_train_examples: 50, max_eval_examples: 30, seed: 3, lm_eval_page_words: 120}
  corpora:
    slimpajama: {dataset: cerebras/SlimPajama-627B, config: null, split: train, text_field: text,
                 source_field: meta.redpajama_set_name, max_documents: 80, validation_fraction: 0.1,
                 test_fraction: 0.1, split_seed: 5}
    fineweb: {dataset: HuggingFaceFW/fineweb, config: sample-10BT, split: train, text_field: text,
              max_documents: 80, validation_fraction: 0.1, test_fraction: 0.1, split_seed: 7}
  tokenizers:
    pythia: {kind: hub, name: PYTHIA, vocab_multiple: 128}
models:
  qwen_500m: {backbone: qwen, n_layers: 2, d_model: 16, n_heads: 2, head_dim: 8, d_ff: 32, max_position: 32,
              type_vocab_size: 0, dropout: 0.0}
pretrain:
  causal_lm: {steps: 2, batch_size: 4, grad_accum: 1, seq_len: 16, lr: 1.0e-3, schedule: constant,
              warmup_steps: 0, weight_decay: 0.0, adam_betas: [0.9, 0.999], adam_eps: 1.0e-8, clip_norm: 1.0,
              checkpoint_every: null}
pretrain_variants:
  ch4: {steps: 3, seq_len: 32, schedule: cosine}
finetune:
  lm_eval: {tasks: [lm_eval_wikitext], batch_size: 8, limit: 3, bootstrap_iters: 2}
  analysis: {tasks: [attention_analysis], batch_size: 8, limit: 3, context_lengths: [8, 16],
             indicator_tokens: 16, indicator_sequences: 2}
"""
RUN = "ch4_hybrid-fixed_seq_qk"


def _profile_documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"The {rng.choice(WORDS)} of town {i} was quiet in the {rng.choice(WORDS)}." for _ in range(12))
            for i in range(n)]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Named data stages on the fixtures, `leanlm pretrain` of one hybrid, then lm_eval and analysis."""
    import torch

    from leanlm.cli import main as leanlm
    from leanlm.data.plumbing.stages import run_stage
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece
    from leanlm.io import write_json, write_jsonl
    from leanlm.stages.finetune import finetune

    root = tmp_path_factory.mktemp("ch4_data_root")
    shutil.copytree(REPO / "params", root / "params")
    shutil.copytree(REPO / "workflow" / "schemas", root / "workflow" / "schemas")
    rows = _slimpajama_rows(80, seed=1)
    fixture = _write_rows(root / "fixtures" / "slimpajama.jsonl", rows)
    pythia = _pythia_like(root / "fixtures" / "pythia", [r["text"] for r in rows])
    (root / "params" / "tiny.yaml").write_text(TINY.replace("PYTHIA", str(pythia)))
    saved = {k: os.environ.get(k) for k in ("LEANLM_ROOT", "LEANLM_CACHE", "DISABLE_MULTIPROC")}
    os.environ.update(LEANLM_ROOT=str(root), LEANLM_CACHE=str(root / "cache"), DISABLE_MULTIPROC="1")
    _load_matrix_cached.cache_clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(named_data, "load_streaming_rows", _fixture_stream(fixture, root / "hf"))
        mp.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
        try:
            # The profile's own data: the lm-eval stand-ins are built from its held-out documents.
            data = root / "data" / "tiny"
            splits = {"train": _profile_documents(12, 0), "validation": _profile_documents(3, 1),
                      "test": _profile_documents(8, 2)}
            for split, docs in splits.items():
                write_jsonl(data / "corpus" / f"{split}.jsonl",
                            [{"doc_id": f"{split}:{i}", "source": "wikipedia", "text": d} for i, d in enumerate(docs)])
            write_json(data / "raw" / "MANIFEST.json", {"source": "packaged", "files": {}})
            profile_tokenizer = train_wordpiece(lambda: iter(splits["train"]), 300, True)
            save_tokenizer(profile_tokenizer, data / "tokenizer", {"kind": "wordpiece"})
            config = load_config("params/tiny.yaml")
            for stage in ("tasks", "corpora", "tokenizers"):
                run_stage(stage, config)
            assert leanlm(["pretrain", "--params", "params/tiny.yaml", "--run", RUN]) == 0
            for run_id, family in ((RUN, "lm_eval"), (RUN, "analysis"), ("ch4_skip-fixed_seq_qk", "lm_eval")):
                finetune(config, run_id, family)
            yield root, config, profile_tokenizer
        finally:
            torch.set_num_threads(threads)
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
            _load_matrix_cached.cache_clear()


def test_pretraining_reads_the_named_corpus_and_tokenizer(tiny_run):
    from tokenizers import Tokenizer

    from leanlm.modeling.checkpoint import load_model

    root, _, _ = tiny_run
    record = json.loads((root / "results" / "tiny" / "runs" / RUN / "pretrain.json").read_text())
    assert record["data"]["packing"] == "eos" and record["data"]["corpus"] == "slimpajama"
    assert record["data"]["corpus_dir"] == "data/tiny/corpora/slimpajama" and record["data"]["tokenizer"] == "pythia"
    assert record["data"]["fixed_sequence"]["corpus"] == "fineweb"  # FixedSeqQK's text: a FineWeb document
    assert record["data"]["fixed_sequence"]["doc_ids"][0].startswith("fineweb:")
    assert record["model"]["vocab_size"] == 384 and math.isfinite(record["validation"]["lm_loss"])  # 300 -> 3 x 128
    model_dir = root / "models" / "tiny" / RUN
    named = Tokenizer.from_file(str(root / "data" / "tiny" / "tokenizers" / "pythia" / "tokenizer.json"))
    assert Tokenizer.from_file(str(model_dir / "tokenizer.json")).to_str() == named.to_str()
    model = load_model(model_dir)
    assert model.model.fixed_token_ids.max() < 300 and model.config.vocab_size == 384


def test_evaluation_encodes_with_the_models_tokenizer(tiny_run):
    from leanlm.training.run_tokenizer import evaluation_tokenizer

    root, config, profile_tokenizer = tiny_run
    named = (root / "models" / "tiny" / RUN / "tokenizer.json").read_text()
    for run_id in (RUN, "ch4_skip-fixed_seq_qk"):  # the skip run evaluates the hybrid's model
        tokenizer = evaluation_tokenizer(config, run_id, profile_tokenizer)
        assert json.loads(tokenizer.to_str()) == json.loads(named) and tokenizer.token_to_id("[CLS]") is None
    for run_id, family in ((RUN, "lm_eval"), (RUN, "analysis"), ("ch4_skip-fixed_seq_qk", "lm_eval")):
        record = json.loads((root / "results" / "tiny" / "runs" / run_id / f"{family}.json").read_text())
        (result,) = record["results"]
        assert math.isfinite(result["primary"]) and result["primary"] > 1, (run_id, family)  # a perplexity
    moved = root / "models" / "tiny" / RUN / "tokenizer.moved"
    os.replace(moved.with_name("tokenizer.json"), moved)
    try:
        with pytest.raises(DataError, match=r"tokenizer.json is missing: run ch4_hybrid-fixed_seq_qk pretrains with"):
            evaluation_tokenizer(config, "ch4_skip-fixed_seq_qk", profile_tokenizer)
    finally:
        os.replace(moved, moved.with_name("tokenizer.json"))


def test_cli_runs_the_named_data_stages(scratch_root):
    """`leanlm data corpora|tokenizers` reach the same stages as DVC's command; smoke names none."""
    from leanlm.cli import main

    for stage in ("corpora", "tokenizers"):
        assert main(["data", stage, "--params", "params/smoke.yaml"]) == 0
        manifest = json.loads((scratch_root / "data" / "smoke" / stage / "MANIFEST.json").read_text())
        assert manifest == {stage: {}}
