"""Chapter 2's BERT baselines on a 50K BPE vocabulary (RoBERTa's) and Appendix 2.11's hashed BPE pieces.

Offline: RoBERTa's tokenizer is a tiny byte-level BPE with RoBERTa's special tokens (<s> <pad> </s> <unk>
<mask>, ids 0..4 as in roberta-base), saved as a local hub-style folder and prepared by the tokenizers
stage (only the reachability check is monkeypatched). A scratch smoke profile names it as
``data.tokenizers.roberta_bpe``; tiny BERTs are pretrained with MLM and Shuffle+Random on it, a hash_subword
HashFormer hashes its pieces, and each is fine-tuned on GLUE with the tokenizer saved beside the model.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from leanlm import paths
from leanlm.config import load_config
from leanlm.data.sources import hub
from leanlm.data import pretrain_data as named_data
from leanlm.data.tokenizer import (is_bert_style, load_tokenizer, special_token_id, special_token_ids,
                                   stored_special_ids, train_wordpiece)
from leanlm.errors import ConfigError, DataError
from leanlm.runs import get_run, runs
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)

torch.set_num_threads(1)

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, as roberta-base
BASELINES = ["ch2_hashformers-bert_mlm", "ch2_hashformers-bert_sr"]
SUBWORD = ["ch2_subword-md5_emb_50k", "ch2_subword-md5_proj", "ch2_subword-lsh_emb_50k", "ch2_subword-lsh_proj"]
WORDS = ("the a cat dog sat ran on under mat rug house garden river bright dark quick slow good bad great "
         "movie film story actor scene plot end start music sound light").split()


def _texts(n, length, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(length)) + "." for _ in range(n)]


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _roberta_like(directory, texts):
    """A byte-level BPE with RoBERTa's special tokens and post-processor, as a local hub-style folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=300, special_tokens=ROBERTA_SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>",
        "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
        "model_max_length": 512}))
    return directory



# --------------------------------------------------------------------------------- special tokens
def test_special_tokens_by_role_in_both_naming_styles(tmp_path):
    texts = _texts(30, 20, 0)
    bert = train_wordpiece(lambda: iter(texts), vocab_size=80, lowercase=True)
    assert special_token_ids(bert) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert special_token_ids(bert) == {role: bert.token_to_id(name) for role, name in
                                       zip(("pad", "unk", "cls", "sep", "mask"), ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))}
    roberta = load_tokenizer(_roberta_like(tmp_path / "roberta", texts))
    assert special_token_ids(roberta) == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}
    assert is_bert_style(roberta) and stored_special_ids(roberta)["cls"] == 0
    encoding = roberta.encode("the cat", "a dog")
    assert encoding.ids[0] == 0 and encoding.ids[-1] == 2  # <s> a </s></s> b </s>
    from tokenizers import Tokenizer, models

    bare = Tokenizer(models.WordLevel({"<pad>": 0, "[UNK]": 1, "<s>": 2, "</s>": 3}, unk_token="[UNK]"))
    assert special_token_id(bare, "pad") == 0 and special_token_id(bare, "mask") is None
    with pytest.raises(DataError, match=r"no mask token.*\[MASK\].*<mask>"):
        special_token_ids(bare)


# ----------------------------------------------------------------------------------------- config
def test_paper_runs_the_baselines_and_subword_hashing_on_roberta_bpe(scratch_root):
    paper = load_config("params/paper.yaml")
    assert paper["data"]["tokenizers"]["roberta_bpe"] == {"kind": "hub", "name": "FacebookAI/roberta-base",
                                                          "vocab_multiple": 1}
    for run in runs(paper):
        if run.experiment.startswith("ch2"):
            named = run.run_id in BASELINES or run.experiment == "ch2_subword"
            assert run.pretrain_tokenizer == ("roberta_bpe" if named else ""), run.run_id
            assert run.pretrain_corpus == "", run.run_id  # the profile's Wikipedia + BookCorpus
    assert {r.run_id for r in runs(paper) if r.pretrain_tokenizer == "roberta_bpe"} == {*BASELINES, *SUBWORD}
    data = named_data.run_data(paper, get_run(paper, "ch2_hashformers-bert_mlm"))
    assert data.tokenizer_dir == scratch_root / "data/paper/tokenizers/roberta_bpe" and data.vocab_multiple == 1
    assert named_data.embedding_rows(50265, 1) == 50265  # RoBERTa-base's rows (Table 2.2)

    smoke = load_config("params/smoke.yaml")
    for run_id in [*BASELINES, *SUBWORD]:
        run = get_run(smoke, run_id)
        assert (run.pretrain_tokenizer, run.pretrain_corpus) == ("", ""), run_id
        assert named_data.run_data(smoke, run).tokenizer_dir == scratch_root / "data/smoke/tokenizer"


def test_named_tokenizer_rules_for_chapter_2(scratch_root):
    ch2 = scratch_root / "params/experiments/ch2.yaml"
    edit_yaml(ch2, lambda d: d["ch2_hashformers"]["runs"]["lsh_proj"].update(pretrain_data={"tokenizer": "roberta_bpe"}))
    with pytest.raises(ConfigError, match=r"run 'lsh_proj'.*objective 'shuffle_random' needs tokenizer: profile or "
                                          r"hash_subword.*not 'hash'"):
        load_config("params/paper.yaml")
    edit_yaml(ch2, lambda d: d["ch2_hashformers"]["runs"]["lsh_proj"].pop("pretrain_data"))
    edit_yaml(ch2, lambda d: d["ch2_hashformers"].update(finetune=["glue", "superglue"]))
    with pytest.raises(ConfigError, match=r"run 'bert_mlm'.*objective 'mlm', by the glue family only; "
                                          r"families superglue"):
        load_config("params/paper.yaml")
    edit_yaml(ch2, lambda d: d["ch2_hashformers"].update(finetune=["glue"]))
    edit_yaml(ch2, lambda d: d["ch2_hashformers"]["runs"]["proformer"].update(pretrain_data={"tokenizer": "roberta_bpe"}))
    with pytest.raises(ConfigError, match="pretrain_data needs an objective that pretrains on the packed corpus"):
        load_config("params/paper.yaml")


# ------------------------------------------------------------------------------------- end to end
@pytest.fixture
def bpe_project(scratch_root, tmp_path, monkeypatch):
    """A scratch smoke profile (ch2 only, tiny) that names a tiny local RoBERTa-style BPE as roberta_bpe,
    prepared by the tokenizers stage."""
    texts = _texts(40, 30, 0)
    source = _roberta_like(tmp_path / "roberta-base", texts)

    def shrink(doc):
        doc["experiments"] = ["ch2_hashformers", "ch2_subword"]
        doc["seeds"] = [0]
        doc["data"]["tokenizers"] = {"roberta_bpe": {"kind": "hub", "name": str(source), "vocab_multiple": 1}}
        doc["models"]["bert"].update(n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=32)
        for block in ("shuffle_random", "mlm"):
            doc["pretrain"][block].update(steps=3, batch_size=4, seq_len=16, warmup_steps=1, checkpoint_every=None)
        doc["pretrain_variants"]["mlm_ch2"] = {"steps": 3, "warmup_steps": 1}
        doc["finetune"]["glue"].update(tasks=["mrpc"], batch_size=8, max_seq_len=24)
        doc["finetune_variants"]["glue_ch2"] = {"epochs": 1, "seeds": [3]}

    edit_yaml(scratch_root / "params/smoke.yaml", shrink)
    data = paths.data_dir("smoke")
    _write_jsonl(data / "corpus/train.jsonl", [{"text": t} for t in texts])
    _write_jsonl(data / "corpus/validation.jsonl", [{"text": t} for t in _texts(6, 30, 1)])
    for split, n in (("train", 16), ("validation", 8), ("test", 8)):
        a, b = _texts(n, 6, len(split)), _texts(n, 5, 7)
        _write_jsonl(data / f"tasks/mrpc/{split}.jsonl",
                     [{"idx": i, "text_a": a[i], "text_b": b[i], "label": i % 2} for i in range(n)])
    monkeypatch.setattr(hub, "ensure_hub_reachable", lambda what, profile: None)
    config = load_config("params/smoke.yaml")
    named_data.run_named_stage("tokenizers", config)
    meta = json.loads((data / "tokenizers/roberta_bpe/META.json").read_text())
    assert meta["special_token_ids"] == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}
    return config


@pytest.mark.parametrize("run_id", ["ch2_hashformers-bert_mlm", "ch2_hashformers-bert_sr", "ch2_subword-md5_proj"])
def test_pretrain_and_glue_with_roberta_bpe(bpe_project, run_id):
    from leanlm.stages.finetune import finetune
    from leanlm.plugins import input_route
    from leanlm.stages.pretrain import pretrain

    config = bpe_project
    run = get_run(config, run_id)
    assert run.pretrain_tokenizer == "roberta_bpe"
    bpe = load_tokenizer(paths.data_dir("smoke") / "tokenizers/roberta_bpe")
    pre = pretrain(config, run_id)
    assert pre["summary"]["steps"] == 3 and pre["data"]["packing"] == "cls_sep"
    assert pre["data"]["tokenizer"] == "roberta_bpe"
    assert torch.isfinite(torch.tensor(list(pre["validation"].values()))).all()
    model_dir = paths.models_dir("smoke") / run_id
    saved = load_tokenizer(model_dir / "tokenizer.json")  # the pieces, even for the hash run
    assert saved.get_vocab() == bpe.get_vocab() and special_token_id(saved, "cls") == 0
    tokenizer = input_route(run).finetuning_tokenizer(config, run)
    if run.tokenizer == "profile":
        assert pre["model"]["vocab_size"] == bpe.get_vocab_size() and pre["model"]["pad_token_id"] == 1
        assert tokenizer.get_vocab() == bpe.get_vocab()
        ids = tokenizer.encode("the cat", "a dog").ids
        assert ids[0] == 0 and ids.count(2) == 3  # <s> a </s></s> b </s>
    else:  # hashed pieces: RoBERTa's specials take the codebook's special rows (pad 0, cls 2, sep 3)
        assert pre["model"]["pad_token_id"] == 0
        ids = tokenizer.encode_batch([("the cat", "a dog")])[0].ids
        assert ids[0] == 2 and ids[-1] == 3 and 0 not in ids
        assert special_token_ids(tokenizer) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    glue = finetune(config, run_id, "glue")
    assert [r["task"] for r in glue["results"]] == ["mrpc"] and glue["seeds"] == [3]
    assert all(0.0 <= r["primary"] <= 1.0 for r in glue["results"])


def test_finetuning_needs_the_saved_tokenizer(bpe_project):
    from leanlm.plugins import input_route

    run = get_run(bpe_project, "ch2_hashformers-bert_sr")
    with pytest.raises(DataError, match=r"tokenizer.json is missing: run ch2_hashformers-bert_sr pretrains with "
                                        r"tokenizer 'roberta_bpe'"):
        input_route(run).finetuning_tokenizer(bpe_project, run)
