"""Ch. 3's encoder-decoder (the translation model) exports with its own code and its BPE: in a fresh process where
leanlm is not importable, ``AutoTokenizer`` gives leanlm's source ids and labels, ``AutoModelForSeq2SeqLM``
(``trust_remote_code``) leanlm's logits for given source and decoder ids, and greedy ``generate()`` leanlm's
translation, for each attention variant the encoder-decoder takes (leanlm.export.remote.seq2seq)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from export_cases import TEXTS, run_fresh, save_run
from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION

TEMPLATES = Path(__file__).resolve().parents[1] / "workflow" / "leanlm" / "export" / "remote"
SOURCES = ["the cat sat on the mat.", "hello world: this is leanlm"]
TARGETS = ["die katze sass auf der matte.", "hallo welt"]
STEPS = 6  # greedy decoding steps compared
ENCDEC = dict(backbone="transformer", n_decoder_layers=2, type_vocab_size=0)
# Every attention variant with a cross-attention form (the token mixers have none), and an untied softmax.
VARIANTS = {name: dict(ENCDEC, attention=name, **({"n_kv_heads": 2} if "n_kv_heads" in ATTENTION.get(name).options
                                                  else {}))
            for name in ATTENTION.names() if getattr(ATTENTION.get(name), "supports_cross", True)}
VARIANTS["mhe_mul-untied"] = dict(ENCDEC, attention="mhe_mul", tie_word_embeddings=False)
LOAD = """
import json, sys
import torch
import transformers
job = json.loads(sys.argv[1])
out = {}
for name, spec in job.items():
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"], trust_remote_code=True)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(spec["dir"], trust_remote_code=True).eval()
    batch = tokenizer(spec["sources"], text_target=spec["targets"], padding=True, return_tensors="pt")
    start = torch.full((len(spec["targets"]), 1), model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat([start, batch["labels"][:, :-1]], 1)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=decoder_input_ids).logits
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   max_new_tokens=spec["steps"], num_beams=1, do_sample=False)
    out[name] = {"input_ids": batch["input_ids"].tolist(), "labels": batch["labels"].tolist(),
                 "logits": logits.tolist(), "generated": generated.tolist(), "class": type(model).__name__}
print(json.dumps(out))
"""


def translation_bpe():
    from leanlm.training.translation_pairs import train_bpe

    return train_bpe(lambda: iter(TEXTS + TARGETS), 150)


def leanlm_batch(tokenizer):
    from leanlm.modeling.seq2seq import BOS_ID, EOS_ID, PAD_ID
    from leanlm.training.translation_pairs import encode_texts

    sources = [ids + [EOS_ID] for ids in encode_texts(tokenizer, SOURCES)]  # as leanlm's translate() encodes
    labels = [ids + [EOS_ID] for ids in encode_texts(tokenizer, TARGETS)]
    pad = lambda rows: torch.tensor([r + [PAD_ID] * (max(map(len, rows)) - len(r)) for r in rows])  # noqa: E731
    ids, targets = pad(sources), pad(labels)
    return {"input_ids": ids, "attention_mask": (ids != PAD_ID).long(),
            "decoder_input_ids": torch.cat([torch.full((len(TARGETS), 1), BOS_ID), targets[:, :-1]], 1)}, targets


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    from leanlm.export import export_hf

    root = tmp_path_factory.mktemp("seq2seq")
    ours, job = {}, {}
    for name, fields in VARIANTS.items():
        tokenizer = translation_bpe()
        model = save_run(root / name / "ckpt", fields, "seq2seq", tokenizer, run_id=f"ch3_encdec-{name}")
        export_hf(root / name / "ckpt", root / name / "hf")
        batch, labels = leanlm_batch(tokenizer)
        with torch.no_grad():
            logits = model(**batch)["logits"]
            generated = model.generate(batch["input_ids"], batch["attention_mask"], max_length=STEPS, beam_size=1,
                                       use_cache=False)
        ours[name] = {"batch": batch, "labels": labels, "logits": logits, "generated": generated}
        job[name] = {"dir": str(root / name / "hf"), "sources": SOURCES, "targets": TARGETS, "steps": STEPS}
    theirs = run_fresh(LOAD, root, job)
    return {name: (ours[name], theirs[name]) for name in job}, root


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_transformers_translates_as_leanlm(round_trips, name):
    ours, theirs = round_trips[0][name]
    assert theirs["class"] == "LeanTransformerForSeq2SeqLM"
    assert theirs["input_ids"] == ours["batch"]["input_ids"].tolist()  # the source ends with </s>
    assert theirs["labels"] == ours["labels"].tolist()  # the target too
    real = ours["labels"] != 0
    logits = torch.tensor(theirs["logits"])
    assert logits.shape == ours["logits"].shape  # the real vocabulary: padded rows stayed behind
    torch.testing.assert_close(logits[real], ours["logits"][real], atol=1e-5, rtol=1e-4)
    generated = torch.tensor(theirs["generated"])
    assert bool((generated[:, 0] == 2).all())  # generate() starts from <s>; leanlm returns what follows it
    assert generated[:, 1:].tolist() == ours["generated"].tolist()


def test_the_export_ships_its_code_and_its_bpe(round_trips):
    root = round_trips[1]
    for name in VARIANTS:
        out = root / name / "hf"
        config = json.loads((out / "config.json").read_text(encoding="utf-8"))
        assert config["auto_map"] == {"AutoConfig": "configuration_leanlm.LeanTransformerConfig",
                                      "AutoModelForSeq2SeqLM": "modeling_leanlm_seq2seq.LeanTransformerForSeq2SeqLM"}
        assert config["is_encoder_decoder"] and config["decoder_start_token_id"] == 2
        shipped = ["configuration_leanlm.py", "modeling_leanlm_attention.py", "modeling_leanlm_seq2seq.py"]
        assert sorted(p.name for p in out.glob("*.py")) == shipped
        for code in shipped:
            assert (out / code).read_bytes() == (TEMPLATES / code).read_bytes()
        assert (out / "tokenizer.json").is_file()


def test_an_encoder_decoder_with_a_token_mixer_is_refused(tmp_path):
    # leanlm builds none (the decoder's cross-attention has no token-mixing form); the export says so by name.
    from leanlm.export.hf import export_target
    from leanlm.modeling.config import ModelConfig

    config = ModelConfig(vocab_size=100, n_layers=1, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=16,
                         **dict(ENCDEC, attention="linear"))
    with pytest.raises(ConfigError, match="attention='linear' cannot be exported to transformers' "
                                          "LeanTransformerForSeq2SeqLM"):
        export_target(config, "seq2seq", "here")


def test_an_encoder_decoder_with_another_tokenizer_is_refused(tmp_path):
    from export_cases import wordpiece
    from leanlm.errors import DataError
    from leanlm.export import export_hf

    save_run(tmp_path / "ckpt", VARIANTS["mha"], "seq2seq", wordpiece())  # [PAD] [UNK] [CLS] [SEP]: not its ids
    with pytest.raises(DataError, match="not the translation BPE's"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_the_exports_special_tokens_are_the_translation_bpes():
    from leanlm.export.remote.seq2seq import SPECIALS
    from leanlm.training.translation_pairs import SPECIAL_TOKENS

    assert sorted(SPECIALS.values()) == list(enumerate(SPECIAL_TOKENS))
