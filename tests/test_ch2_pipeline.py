"""Chapter 2 in the pipeline: the ch2 matrix in both profiles, hash inputs (codebook tokenizer and batch
features), the Shuffle+Random objective, runs without pretraining (ProFormer) or from a hub checkpoint
(CANINE-C, a tiny local one here), Table 2.3's timing fields, all on tiny models and data, offline."""

from __future__ import annotations

import json
import random

import pytest
import torch

from leanlm import paths
from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.hashing import HashCodebook, MD5Hasher
from leanlm.runs import finetune_seeds, finetune_settings, get_run, pretrain_settings, runs
from leanlm.training import step_timing
from leanlm.hashing.inputs import CodebookTokenizer, FeatureBatches, assemble, with_features
from leanlm.training.objectives import pack_sequences
from leanlm.training.shuffle_random import IGNORE_INDEX
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)

torch.set_num_threads(1)

HASHFORMERS = ["bert_mlm", "bert_sr", "canine_c", "proformer", "md5_emb_50k", "md5_emb_1k", "md5_pool",
               "md5_add", "md5_proj", "lsh_emb_50k", "lsh_emb_1k", "lsh_pool", "lsh_add", "lsh_proj"]
SUBWORD = ["md5_emb_50k", "md5_proj", "lsh_emb_50k", "lsh_proj"]
RELATED = ["bert_hash_nano", "bert_hash_pico", "bert_hash_femto", "eelbert"]
CH2 = ["ch2_hashformers", "ch2_subword", "ch2_related"]


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("profile", ["smoke", "paper", "rehearsal"])
def test_ch2_matrix_loads_in_both_profiles(profile):
    config = load_config(f"params/{profile}.yaml")
    assert set(CH2) <= set(config["experiments"])
    matrix = config["_matrix"]
    assert list(matrix["ch2_hashformers"]["runs"]) == HASHFORMERS
    assert list(matrix["ch2_subword"]["runs"]) == SUBWORD
    assert list(matrix["ch2_related"]["runs"]) == RELATED
    by_id = {run.run_id: run for run in runs(config)}
    canine = "ch2_hashformers-canine_c"
    if profile == "smoke":  # offline: CANINE-C is absent, with the reason reporting prints
        assert canine not in by_id
        assert config["absent_runs"] == {
            canine: "CANINE-C needs the hub checkpoint google/canine-c; profile smoke is offline (source: packaged)"}
    else:
        assert config["absent_runs"] == {}
        assert by_id[canine].objective == "hub" and by_id[canine].hub_checkpoint == "google/canine-c"
    mlm, sr = by_id["ch2_hashformers-bert_mlm"], by_id["ch2_hashformers-bert_sr"]
    assert (mlm.objective, mlm.tokenizer, sr.objective, sr.tokenizer) == ("mlm", "profile", "shuffle_random", "profile")
    assert by_id["ch2_hashformers-lsh_proj"].tokenizer == "hash"
    assert by_id["ch2_subword-lsh_proj"].tokenizer == "hash_subword"
    assert by_id["ch2_hashformers-proformer"].objective == "none"
    assert by_id["ch2_hashformers-proformer"].model["n_layers"] == 2  # ProFormer: two encoder layers
    assert by_id["ch2_related-eelbert"].objective == "mlm"
    assert pretrain_settings(config, by_id["ch2_hashformers-proformer"]) == {}
    # Emb (50K) is BERT-vocabulary-sized: the thesis's 50,260 rows, the smoke tokenizer's 4096.
    buckets = by_id["ch2_hashformers-lsh_emb_50k"].model["embedding_options"]["buckets"]
    assert buckets == {"paper": "50K", "smoke": 4096, "rehearsal": 1024}[profile]
    assert by_id["ch2_hashformers-md5_emb_1k"].model["embedding_options"]["buckets"] == "1K"
    glue = finetune_settings(config, sr, "glue")
    if profile == "paper":  # Tables 2.4 and 2.5
        assert pretrain_settings(config, mlm)["steps"] == 500_000 and pretrain_settings(config, mlm)["lr"] == 1e-4
        s = pretrain_settings(config, sr)
        assert (s["lr"], s["batch_size"], s["seq_len"], s["warmup_steps"]) == (5e-5, 128, 512, 10_000)
        assert glue["epochs"] == 5 and glue["lr"] == 3e-5 and glue["batch_size"] == 32
        assert finetune_seeds(config, sr, "glue") == [0, 1, 2]
        assert config["finetune"]["glue"]["epochs"] == 20  # ch. 3's block is untouched
    else:
        assert finetune_seeds(config, sr, "glue") == [0]  # smoke: one seed keeps ch. 2 in minutes



def test_config_errors_name_the_problem(scratch_root):
    ch2, smoke = scratch_root / "params/experiments/ch2.yaml", scratch_root / "params/smoke.yaml"
    from leanlm.config import _load_matrix_cached

    edit_yaml(ch2, lambda d: d["ch2_hashformers"]["runs"]["md5_proj"].update(tokenizer="profile"))
    _load_matrix_cached.cache_clear()
    with pytest.raises(ConfigError, match="md5_proj.*tokenizer must be one of"):
        load_config("params/smoke.yaml")
    edit_yaml(ch2, lambda d: d["ch2_hashformers"]["runs"]["md5_proj"].update(tokenizer="hash"))
    _load_matrix_cached.cache_clear()
    # A variant may keep some of its family's tasks (the data stage prepares them all), never add one.
    edit_yaml(smoke, lambda d: d["finetune_variants"]["glue_ch2"].update(tasks=["rte", "squad_v1"]))
    with pytest.raises(ConfigError, match="finetune_variants.glue_ch2.tasks.*squad_v1.*not in finetune.glue"):
        load_config("params/smoke.yaml")
    edit_yaml(smoke, lambda d: d["finetune_variants"]["glue_ch2"].update(tasks=[]))
    with pytest.raises(ConfigError, match="finetune_variants.glue_ch2.tasks"):
        load_config("params/smoke.yaml")
    edit_yaml(smoke, lambda d: d["finetune_variants"]["glue_ch2"].update(tasks=["sst2", "rte"]))
    config = load_config("params/smoke.yaml")
    run = next(r for r in runs(config) if r.run_id == "ch2_hashformers-md5_proj")
    assert finetune_settings(config, run, "glue")["tasks"] == ["sst2", "rte"]
    assert config["finetune"]["glue"]["tasks"][:2] == ["mnli", "qnli"]  # the family's own block is untouched
    edit_yaml(smoke, lambda d: d["finetune_variants"].update(glue_ch2={"epochs": 0}))
    with pytest.raises(ConfigError, match="glue_ch2.*epochs"):
        load_config("params/smoke.yaml")
    edit_yaml(smoke, lambda d: d.pop("finetune_variants"))
    with pytest.raises(ConfigError, match="add finetune_variants.glue_ch2"):
        load_config("params/smoke.yaml")


# ------------------------------------------------------------------------------------- hash inputs
def test_codebook_tokenizer_encodes_like_a_bert_tokenizer():
    tok = CodebookTokenizer(HashCodebook(MD5Hasher()))
    single, pair = tok.encode_batch(["The cat sat.", ("Hello there", "General Kenobi!")])
    index = tok.codebook.index
    assert single.ids == [index[t] for t in ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]]
    assert single.type_ids == [0] * 6
    assert pair.type_ids == [0, 0, 0, 0, 1, 1, 1, 1]
    assert tok.token_to_id("[PAD]") == 0 and tok.get_vocab_size() == len(tok.codebook)
    # Longest-first truncation as `tokenizers` does it: the shorter side keeps up to half the budget.
    tok.enable_truncation(max_length=8)
    cut = tok.encode("a b c d e f g h", pair="x y")
    assert cut.type_ids.count(0) - 2 == 3 and cut.type_ids.count(1) - 1 == 2
    assert [len(e.ids) for e in tok.encode_batch(["w " * 20])] == [8]
    tok.no_truncation()
    assert len(tok.encode("w " * 20).ids) == 22
    assert assemble([7, 8, 9, 10], [11, 12, 13, 14], 2, 3, 9).ids == [2, 7, 8, 9, 3, 11, 12, 13, 3]


def _sr_batches(book, texts, seq_len=16):
    from leanlm.objectives.shuffle_random import ShuffleRandomObjective

    tok = CodebookTokenizer(book)
    docs = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    rows = pack_sequences(docs, seq_len, tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"))
    settings = {"batch_size": 8, "grad_accum": 1, "shuffle_prob": 0.2, "random_prob": 0.2}
    return tok, ShuffleRandomObjective().batches(settings, tok, rows, seed=0)


def test_shuffle_random_batches_carry_hash_features():
    from leanlm.modeling.config import ModelConfig
    from leanlm.modeling.models import build_model

    book = HashCodebook(MD5Hasher(), n_buckets=97)
    tok, batches = _sr_batches(book, [" ".join(f"word{i % 37} tok{i % 11}" for i in range(j, j + 60)) for j in range(20)])
    config = ModelConfig(vocab_size=len(book), n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                         max_position=32, embedding="hash_proj")
    wrapped = with_features(batches, config, tok)
    assert isinstance(wrapped, FeatureBatches)
    batch = wrapped(3, 0)
    ids, labels = batch["input_ids"], batch["labels"]
    special = ids < book.n_special
    assert (labels[special] == IGNORE_INDEX).all() and (labels[~special] != IGNORE_INDEX).all()
    assert (labels == 1).any() and (labels == 2).any()
    assert (ids[labels == 2] >= book.n_special).all()  # random replacements are regular tokens
    assert torch.equal(batch["hash_bits"], book.bits(ids))  # features of the corrupted ids
    again = wrapped(3, 0)  # random access: the same (step, micro) gives the same batch
    assert torch.equal(again["input_ids"], ids) and torch.equal(again["labels"], labels)
    model = build_model(config, "shuffle_random")
    loss = model(**batch)["loss"]
    assert torch.isfinite(loss)
    # A standard-embedding model reads no feature: its batches are passed through untouched.
    plain = ModelConfig(vocab_size=len(book), n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=32)
    assert with_features(batches, plain, tok) is batches


def test_step_clock_leaves_out_the_first_step(monkeypatch):
    ticks = iter([0.0, 10.0, 11.0, 12.0, 13.0])  # step 0 starts at 0, takes 10 s (warm-up)
    monkeypatch.setattr(step_timing.time, "perf_counter", lambda: next(ticks))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    clock = step_timing.StepClock(samples_per_step=4)
    for step in range(4):
        for _ in range(2):  # a step is marked once, at its start
            clock.mark(step)
    clock.finish()
    timing = clock.timing()
    assert timing["timed_steps"] == 3 and timing["seconds_per_sample"] == pytest.approx(3.0 / 12)
    assert step_timing.StepClock(4).timing()["seconds_per_sample"] is None
    results = [{"inference_seconds": 1.0, "inference_examples": 10}, {"inference_seconds": 3.0, "inference_examples": 30}]
    assert step_timing.inference_timing(results)["inference_seconds_per_sample"] == pytest.approx(0.1)


# ------------------------------------------------------------------------------- end to end, tiny
WORDS = ("play plays played playing player run runs running ran runner the a of and to in is was "
         "good bad great movie film story actor scene plot end start music sound light dark").split()


def _texts(n, length, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(length)) + "." for _ in range(n)]


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def tiny_project(scratch_root):
    """A scratch smoke profile with the ch2 matrix only, tiny sizes, and tiny data on disk."""
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece

    def shrink(doc):
        doc["experiments"] = list(CH2)
        doc["seeds"] = [0]
        doc["models"]["bert"].update(n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=32)
        for block in ("shuffle_random", "mlm"):
            doc["pretrain"][block].update(steps=4, batch_size=4, seq_len=16, warmup_steps=1, checkpoint_every=None)
        doc["pretrain_variants"]["mlm_ch2"] = {"steps": 4, "warmup_steps": 1}
        doc["finetune"]["glue"].update(tasks=["mrpc", "stsb"], batch_size=8, max_seq_len=24)
        doc["finetune_variants"]["glue_ch2"] = {"epochs": 1, "seeds": [3]}

    edit_yaml(scratch_root / "params/smoke.yaml", shrink)
    data = paths.data_dir("smoke")
    _write_jsonl(data / "corpus/train.jsonl", [{"text": t} for t in _texts(40, 30, 0)])
    _write_jsonl(data / "corpus/validation.jsonl", [{"text": t} for t in _texts(6, 30, 1)])
    texts = _texts(40, 30, 0)
    save_tokenizer(train_wordpiece(lambda: iter(texts), vocab_size=80, lowercase=True), data / "tokenizer", {"kind": "wordpiece"})
    rng = random.Random(2)
    for seed, (split, n) in enumerate((("train", 24), ("validation", 10), ("test", 10))):
        a, b = _texts(n, 6, 11 + seed), _texts(n, 5, 7)  # not hash(split): it changes with every process
        _write_jsonl(data / f"tasks/mrpc/{split}.jsonl",
                     [{"idx": i, "text_a": a[i], "text_b": b[i], "label": i % 2} for i in range(n)])
        _write_jsonl(data / f"tasks/stsb/{split}.jsonl",
                     [{"idx": i, "text_a": a[i], "text_b": b[i], "label": round(rng.uniform(0, 5), 2)} for i in range(n)])
    return scratch_root


def _run(config, run_id):
    from leanlm.stages.finetune import finetune
    from leanlm.stages.pretrain import pretrain

    return pretrain(config, run_id), finetune(config, run_id, "glue")


@pytest.mark.parametrize("run_id", ["ch2_hashformers-lsh_proj", "ch2_subword-lsh_emb_50k",
                                    "ch2_hashformers-bert_sr", "ch2_related-eelbert"])
def test_pretrain_and_glue_end_to_end(tiny_project, run_id):
    config = load_config("params/smoke.yaml")
    run = get_run(config, run_id)
    pre, glue = _run(config, run_id)
    assert pre["objective"] == run.objective and pre["summary"]["steps"] == 4
    assert pre["timing"]["timed_steps"] == 3 and pre["timing"]["seconds_per_sample"] > 0
    assert torch.isfinite(torch.tensor(list(pre["validation"].values()))).all()
    hashed = run.tokenizer != "profile"
    codebook = paths.models_dir("smoke") / run_id / "codebook" / "codebook.json"
    assert codebook.is_file() == hashed
    if hashed:  # the saved hasher, without the pretraining rows
        assert json.loads(codebook.read_text())["rows"] == 5
    assert pre["parameters"]["word_embedding"] > 0 or run.model["embedding"] == "eelbert"
    assert glue["seeds"] == [3] and glue["finetune"]["epochs"] == 1  # the glue_ch2 variant
    assert [r["task"] for r in glue["results"]] == ["mrpc", "stsb"]
    assert glue["timing"]["inference_seconds_per_sample"] > 0
    assert glue["timing"]["inference_examples"] == 20
    saved = json.loads((paths.results_dir("smoke") / "runs" / run_id / "glue.json").read_text())
    assert saved["timing"]["inference_seconds_per_sample"] == glue["timing"]["inference_seconds_per_sample"]


def test_proformer_is_not_pretrained(tiny_project):
    config = load_config("params/smoke.yaml")
    pre, glue = _run(config, "ch2_hashformers-proformer")
    assert pre["timing"] == {"seconds": 0.0, "seconds_per_sample": None}
    assert pre["summary"]["steps"] == 0
    assert pre["parameters"]["word_embedding"] == 420 * 16  # Eq. 2.11: 420 bits x d
    assert (paths.models_dir("smoke") / "ch2_hashformers-proformer" / "model.safetensors").is_file()
    assert len(glue["results"]) == 2
    # Our model's record is its own config, which Table 2.2 rebuilds to count it (a hub checkpoint's
    # record shape once leaked onto every run's and failed that rendering).
    from leanlm.modeling.config import ModelConfig

    assert "hub_config" not in glue["model"] and glue["model"]["positions"] == "sinusoidal"
    ModelConfig.from_dict(glue["model"], where="glue.json key model")


def test_hub_checkpoint_run_from_a_local_canine(tiny_project, tmp_path):
    from transformers import CanineConfig, CanineModel

    local = tmp_path / "tiny-canine"
    CanineModel(CanineConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                             num_hash_buckets=128, num_hash_functions=4)).save_pretrained(local)
    root = tiny_project
    edit_yaml(root / "params/experiments/ch2.yaml",
              lambda d: d["ch2_hashformers"]["runs"]["canine_c"].update(hub_checkpoint=str(local)))
    edit_yaml(root / "params/smoke.yaml", lambda d: d.update(source="hub"))  # the run is present with the hub
    from leanlm.config import _load_matrix_cached

    _load_matrix_cached.cache_clear()
    config = load_config("params/smoke.yaml")
    assert config["absent_runs"] == {}
    pre, glue = _run(config, "ch2_hashformers-canine_c")
    assert pre["objective"] == "hub" and pre["timing"]["seconds_per_sample"] is None
    assert pre["parameters"]["word_embedding"] == 128 * 16  # 4 hash functions x 128 buckets x d/4
    assert json.loads((paths.models_dir("smoke") / "ch2_hashformers-canine_c" / "config.json").read_text())[
        "model_type"] == "canine"
    assert glue["timing"]["inference_seconds_per_sample"] > 0 and len(glue["results"]) == 2
    # The aggregation reads the record's model columns: a hub config has none of ours (the rehearsal's
    # aggregate once stopped at "no key model.attention"); they come from the checkpoint's own config.
    from leanlm.reporting.aggregate import rows_from_file

    rows = rows_from_file(paths.results_dir("smoke") / "runs" / "ch2_hashformers-canine_c" / "glue.json", "smoke")
    assert {(r["attention"], r["n_layers"], r["d_model"], r["n_heads"], r["head_dim"]) for r in rows} == {
        ("mha", 1, 16, 2, 8)}
    assert glue["model"]["hub_config"]["model_type"] == "canine"
