"""The hub source reading a local mirror (compute nodes without network), on fixtures in the hub's
exact schemas: the ``datasets`` features of nyu-mll/glue sst2, rajpurkar/squad, wmt/wmt14 de-en and
Salesforce/wikitext as the hub declares them (ClassLabel labels, int32 idx, a Sequence of answers, a
Translation column), saved with ``save_to_disk`` as ``leanlm mirror`` saves them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Translation, Value  # noqa: E402

from leanlm.data.sources import hub  # noqa: E402
from leanlm.data.plumbing import mirror
from leanlm.data.tasks import get_task  # noqa: E402
from leanlm.errors import DataError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# The hub's own features (datasets' info of each config), not shaped by what our loaders read.
SST2 = Features({"sentence": Value("string"), "label": ClassLabel(names=["negative", "positive"]),
                 "idx": Value("int32")})
SQUAD = Features({"id": Value("string"), "title": Value("string"), "context": Value("string"),
                  "question": Value("string"),
                  "answers": Sequence({"text": Value("string"), "answer_start": Value("int32")})})
WMT14 = Features({"translation": Translation(languages=["de", "en"])})
WIKITEXT = Features({"text": Value("string")})


def _sst2() -> DatasetDict:
    rows = {"train": [("a warm , funny film", 1), ("dull and far too long", 0), ("the cast is superb", 1)],
            "validation": [("it 's a charming and often affecting journey . ", 1)],
            "test": [("uneasy mishmash of styles and genres .", -1)]}
    return DatasetDict({split: Dataset.from_dict(
        {"sentence": [s for s, _ in pairs], "label": [label for _, label in pairs], "idx": list(range(len(pairs)))},
        features=SST2) for split, pairs in rows.items()})  # the hub's test labels are hidden: -1


def _squad() -> DatasetDict:
    context = "Architecturally, the school has a Catholic character. Atop the Main Building's gold dome is a statue."

    def split(n: int) -> Dataset:
        return Dataset.from_dict({
            "id": [f"5733be284776f4190066{i:04d}" for i in range(n)],
            "title": [f"University_of_Notre_Dame_{i}" for i in range(n)],
            "context": [context] * n,
            "question": ["What sits on top of the Main Building?"] * n,
            "answers": [{"text": ["a statue"], "answer_start": [context.index("a statue")]}] * n,
        }, features=SQUAD)

    return DatasetDict({"train": split(4), "validation": split(2)})


def _wmt14() -> DatasetDict:
    pairs = [("Wiederaufnahme der Sitzungsperiode", "Resumption of the session"),
             ("Das Haus ist klein.", "The house is small.")]
    return DatasetDict({split: Dataset.from_dict({"translation": [{"de": de, "en": en} for de, en in pairs]},
                                                 features=WMT14) for split in ("train", "validation", "test")})


def _wikitext() -> DatasetDict:
    lines = ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 is a tactical role @-@ playing game . \n"]
    return DatasetDict({split: Dataset.from_dict({"text": lines}, features=WIKITEXT)
                        for split in ("train", "validation", "test")})


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    for (dataset, config), data in {("nyu-mll/glue", "sst2"): _sst2(), ("rajpurkar/squad", None): _squad(),
                                    ("wmt/wmt14", "de-en"): _wmt14(),
                                    ("Salesforce/wikitext", "wikitext-103-raw-v1"): _wikitext()}.items():
        data.save_to_disk(str(mirror.dataset_dir(root, dataset, config)))
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "house"])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(
        str(mirror.tokenizer_dir(root, "google-bert/bert-base-uncased")))
    return root


def test_every_family_reads_the_mirror_offline(filled, offline_with):
    from leanlm.data.task_sources import FAMILIES

    offline_with(filled)
    sst2, provenance = FAMILIES.get("glue").load_hub(get_task("sst2"), "paper", 13, 0.0)
    assert [(r["text_a"], r["label"]) for r in sst2["train"]] == [
        ("a warm , funny film", 1), ("dull and far too long", 0), ("the cast is superb", 1)]
    assert sst2["validation"][0]["idx"] == 0 and sst2["test"] == [] and provenance["dataset"] == "nyu-mll/glue"
    squad, _ = FAMILIES.get("squad").load_hub(get_task("squad_v1"), "paper", 13, 0.0)
    assert len(squad["train"]) == 4 and squad["validation"][0]["answers"]["text"] == ["a statue"]
    wmt, _ = FAMILIES.get("translation").load_hub(get_task("wmt14"), "paper", 13, 0.0)
    assert wmt["test"][1] == {"idx": 1, "source": "The house is small.", "target": "Das Haus ist klein."}
    wiki, _ = FAMILIES.get("lm").load_hub(get_task("wikitext103"), "paper", 13, 0.0)
    assert [r["idx"] for r in wiki["train"]] == [1, 3] and wiki["test"][0]["text"] == " = Valkyria Chronicles III = \n"


def test_hub_tokenizer_reads_the_mirror(filled, offline_with):
    from leanlm.data.tokenizer import hub_tokenizer

    offline_with(filled)
    tokenizer = hub_tokenizer("google-bert/bert-base-uncased", "paper")
    assert tokenizer.encode("the house", add_special_tokens=False).tokens == ["the", "house"]


def test_a_missing_item_names_the_mirror_and_the_fill_command(filled, offline_with):
    offline_with(filled)
    with pytest.raises(DataError, match=r"hub mirror .*no dataset nyu-mll/glue \(config cola\).*leanlm mirror "
                                        r"--params params/paper.yaml"):
        hub.load_hub_dataset(get_task("cola"), "paper")
    with pytest.raises(DataError, match="no tokenizer EleutherAI/pythia-160m"):
        from leanlm.data.tokenizer import hub_tokenizer

        hub_tokenizer("EleutherAI/pythia-160m", "paper")


def test_offline_without_a_mirror_names_the_setting(offline_with):
    offline_with(None)
    with pytest.raises(DataError, match=r"unreachable .*no hub mirror is set; set data\.hub_mirror .*"
                                        r"LEANLM_HUB_MIRROR.*leanlm mirror --params params/paper\.yaml"):
        hub.load_hub_dataset(get_task("sst2"), "paper")


def test_paper_profile_stages_read_the_mirror_setting(filled, offline_with, tmp_path, monkeypatch):
    from leanlm.data.plumbing.stages import run_stage

    offline_with(None)  # only the profile's data.hub_mirror says where the mirror is
    shutil.copytree(REPO / "params", tmp_path / "params")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    config = yaml.safe_load((tmp_path / "params" / "paper.yaml").read_text())
    config["data"]["hub_mirror"] = str(filled)
    config["finetune"] = {"glue": {**config["finetune"]["glue"], "tasks": ["sst2"]}}
    run_stage("fetch", config)
    run_stage("tasks", config)
    meta = json.loads((tmp_path / "data" / "paper" / "tasks" / "sst2" / "META.json").read_text())
    assert meta["source"] == "hub" and meta["splits"]["train"]["rows"] == 3


def test_fill_saves_what_the_loaders_return_in_the_hubs_schema(tmp_path, monkeypatch):
    from leanlm.config import load_config
    from leanlm.data.plumbing import mirror_fill

    config = load_config("params/paper.yaml")
    config["finetune"] = {"glue": {**config["finetune"]["glue"], "tasks": ["sst2"]}}
    config["data"] = {**config["data"], "corpora": {}, "tokenizers": {}, "tokenizer": {"kind": "wordpiece"}}
    config["source"] = "hub"
    seen = []
    monkeypatch.setattr(hub, "load_hub_dataset", lambda spec, profile: seen.append(mirror.active_mirror()) or _sst2())
    monkeypatch.setattr(mirror_fill, "_corpus_items", lambda config, root: [])
    monkeypatch.setattr(mirror_fill, "_model_items", lambda config, root: [])
    record = mirror_fill.fill_mirror(config, tmp_path / "m")
    assert seen == [None]  # filling reads the hub, not the mirror being filled
    saved = datasets.load_from_disk(str(mirror.dataset_dir(tmp_path / "m", "nyu-mll/glue", "sst2")))
    assert saved["train"].features == SST2 and saved["train"]["sentence"] == _sst2()["train"]["sentence"]
    assert record["items"]["datasets"] == ["datasets/nyu-mll/glue/sst2"]
    assert record["bytes"] == mirror.directory_size(tmp_path / "m") - (tmp_path / "m" / "MIRROR.json").stat().st_size
    assert json.loads((tmp_path / "m" / "MIRROR.json").read_text())["profile"] == "paper"


def test_pretraining_corpora_stream_from_the_mirror(tmp_path, offline_with):
    # wikimedia/wikipedia 20231101.en and bookcorpus/bookcorpus, with the hub's columns.
    wiki = Dataset.from_dict({"id": ["12", "25"], "url": ["https://en.wikipedia.org/wiki/Anarchism"] * 2,
                              "title": ["Anarchism", "Autism"],
                              "text": ["Anarchism is a political philosophy.", "Autism is a condition."]},
                             features=Features({k: Value("string") for k in ("id", "url", "title", "text")}))
    books = Dataset.from_dict({"text": ["the half-ling book one .", "it was dark .", "we left ."]},
                              features=Features({"text": Value("string")}))
    for corpus, data in zip(hub.HUB_CORPORA, (wiki, books)):
        data.save_to_disk(str(mirror.corpus_dir(tmp_path, corpus["dataset"], corpus["config"], corpus["split"])))
    offline_with(tmp_path)
    documents = list(hub.stream_hub_corpus("paper"))
    assert [d.doc_id for d in documents] == ["wikipedia:12", "bookcorpus:0", "wikipedia:25"]
    assert documents[1].text == "the half-ling book one . it was dark . we left ."


def test_hub_checkpoint_runs_start_from_the_mirror(tmp_path, offline_with, monkeypatch):
    from transformers import BertConfig, BertModel

    from leanlm.config import load_config
    from leanlm.runs import get_run
    from leanlm.objectives.hub import HubCheckpoint

    config = load_config("params/paper.yaml")
    run = get_run(config, "ch2_hashformers-canine_c")
    tiny = BertModel(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16))
    tiny.save_pretrained(str(mirror.model_dir(tmp_path / "m", run.hub_checkpoint)))
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path / "root"))
    offline_with(None)
    with pytest.raises(DataError, match="no hub mirror is set"):
        HubCheckpoint().run(config, run)
    offline_with(tmp_path / "m")
    record = HubCheckpoint().run(config, run)
    assert record["hub_checkpoint"] == "google/canine-c" and record["parameters"]["total"] == tiny.num_parameters()
    assert (tmp_path / "root" / "models" / "paper" / run.run_id / "model.safetensors").is_file()
