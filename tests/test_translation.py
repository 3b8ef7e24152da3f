"""The translation family: PO catalogues -> stand-in, hub mapping, BLEU, BPE, a tiny train + translate run."""

from __future__ import annotations

import json
import math
import random
import zipfile

import pytest
import torch

from leanlm import paths
from leanlm.data.tasks import get_task
from leanlm.data.task_sets import check_rows
from leanlm.errors import DataError

REAL_CACHE = paths.cache_dir()  # read before any test changes LEANLM_CACHE

PO_FIXTURE = r'''# German translation of a Django app.
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: forms.py:12
msgid "Enter a valid email address."
msgstr "Bitte gültige E-Mail-Adresse eingeben."

msgid ""
"This password is too common and "
"easily guessed."
msgstr ""
"Dieses Passwort ist zu üblich und "
"leicht zu erraten."

#, python-format
msgid "Delete selected %(verbose_name_plural)s"
msgstr "Ausgewählte %(verbose_name_plural)s löschen"

msgid "Show <b>all</b>"
msgstr "<b>Alle</b> zeigen"

msgctxt "abbrev. month"
msgid "Jan."
msgstr "Jan."

msgid "One item"
msgid_plural "%(count)s items"
msgstr[0] "Ein Element"
msgstr[1] "%(count)s Elemente"

#, fuzzy
msgid "Log out"
msgstr "Ausloggen"

msgid "Untranslated"
msgstr ""

msgid "Say \"hello\""
msgstr "Sag \"hallo\""
#~ msgid "Obsolete"
#~ msgstr "Veraltet"
'''


# --------------------------------------------------------------------------------- catalogues
def test_parse_po_entries():
    from leanlm.data.families.translation import parse_po

    messages = {m.msgid: m for m in parse_po(PO_FIXTURE, "fixture.po")}
    assert messages["Enter a valid email address."].msgstr == "Bitte gültige E-Mail-Adresse eingeben."
    assert messages["This password is too common and easily guessed."].msgstr == \
        "Dieses Passwort ist zu üblich und leicht zu erraten."
    assert messages["One item"].msgstr == "Ein Element"           # plural: the singular pair
    assert messages['Say "hello"'].msgstr == 'Sag "hallo"'          # escapes
    assert messages["Jan."].context == "abbrev. month"
    assert "python-format" in messages["Delete selected %(verbose_name_plural)s"].flags
    assert not {"", "Log out", "Untranslated", "Obsolete"} & set(messages)  # header, fuzzy, empty, obsolete


def test_plain_pairs_drop_placeholders_markup_and_copies():
    from leanlm.data.families.translation import parse_po, plain_pair

    pairs = [p for p in map(plain_pair, parse_po(PO_FIXTURE)) if p]
    assert pairs == [
        ("Enter a valid email address.", "Bitte gültige E-Mail-Adresse eingeben."),
        ("This password is too common and easily guessed.", "Dieses Passwort ist zu üblich und leicht zu erraten."),
        ("One item", "Ein Element"),
        ('Say "hello"', 'Sag "hallo"'),
    ]


def test_malformed_po_names_the_line():
    from leanlm.data.families.translation import parse_po

    with pytest.raises(DataError, match=r"bad\.po, line 2"):
        parse_po('msgid "a"\nthis is not PO\n', "bad.po")


def _build_standin(raw_dir):
    from leanlm.data.families.glue_standins import BuildContext, StandInSources
    from leanlm.data.families.translation import build_wmt14

    return build_wmt14(StandInSources(raw_dir), BuildContext("wmt14", 13, random.Random(0)))


def _check_standin(rows: dict) -> None:
    spec = get_task("wmt14")
    for split, split_rows in rows.items():
        assert split_rows, split
        check_rows(spec, split, [{"idx": i, **r} for i, r in enumerate(split_rows)])
    sources = [{r["source"].casefold() for r in rows[s]} for s in ("train", "validation", "test")]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])


def test_standin_from_the_fetch_stage(tmp_path, monkeypatch):
    """fetch (fake wheels in the django layout) -> raw catalogues -> rows that pass the row contract."""
    from fake_wheels import pin_fake_wheels, write_fake_wheels
    from leanlm.data.sources.packaged import fetch_packaged

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    write_fake_wheels(tmp_path / "cache" / "packages")
    for key, value in pin_fake_wheels(tmp_path / "cache" / "packages").items():
        monkeypatch.setenv(key, value)
    manifest = fetch_packaged(tmp_path / "raw")
    assert manifest["packages"]["django"]["version"] == "5.2.8"
    assert "django/contrib-admin-djangojs.po" in manifest["files"]
    rows = _build_standin(tmp_path / "raw")
    _check_standin(rows)
    assert all("%" not in r["target"] for split in rows.values() for r in split)


def test_standin_needs_the_fetched_catalogues(tmp_path):
    with pytest.raises(DataError, match="fetch"):
        _build_standin(tmp_path)


def test_standin_from_the_real_django_wheel(tmp_path):
    """Real English-German pairs, when the Django wheel is cached (the fetch stage puts it there)."""
    from leanlm.data.sources.packaged import PACKAGED_FILES, PACKAGES, find_wheel

    wheel = find_wheel("django", PACKAGES["django"], REAL_CACHE / "packages")
    if wheel is None:
        pytest.skip(f"the Django wheel is not cached in {REAL_CACHE / 'packages'}")
    with zipfile.ZipFile(wheel) as archive:
        for item in PACKAGED_FILES:
            if item.package == "django":
                (tmp_path / item.raw_name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / item.raw_name).write_bytes(archive.read(item.member))
    rows = _build_standin(tmp_path)
    _check_standin(rows)
    pairs = {r["source"]: r["target"] for split in rows.values() for r in split}
    assert len(pairs) > 500
    assert pairs["Enter a valid email address."] == "Bitte gültige E-Mail-Adresse eingeben."
    assert pairs["January"] == "Januar" and pairs["Yes"] == "Ja"
    german = sum(any(c in t for c in "äöüßÄÖÜ") for t in pairs.values())
    assert german > 50  # German text, not copies of the English


# --------------------------------------------------------------------------------- hub
def _hub_fixture() -> dict:
    def rows(n, tag):
        return [{"translation": {"de": f"Das ist Satz {i} ({tag}).", "en": f"This is sentence {i} ({tag})."}}
                for i in range(n)]

    train = rows(4, "train") + [{"translation": {"de": "", "en": "An empty German side."}}]
    return {"train": train, "validation": rows(2, "newstest2013"), "test": rows(3, "newstest2014")}


def test_hub_mapping_on_fixture():
    from leanlm.data.families.translation import translation_splits

    spec = get_task("wmt14")
    splits, provenance = translation_splits(spec, _hub_fixture())
    assert {k: len(v) for k, v in splits.items()} == {"train": 4, "validation": 2, "test": 3}
    assert splits["test"][1] == {"idx": 1, "source": "This is sentence 1 (newstest2014).",
                                 "target": "Das ist Satz 1 (newstest2014)."}
    assert provenance["direction"] == "en->de" and provenance["empty_pairs_dropped"] == 1
    for split, rows in splits.items():
        check_rows(spec, split, rows)


def test_hub_mapping_errors():
    from leanlm.data.families.translation import load_wmt14, map_translation_rows, translation_splits

    spec = get_task("wmt14")
    with pytest.raises(DataError, match="translation"):
        map_translation_rows(spec, [{"en": "flat", "de": "flach"}])
    with pytest.raises(DataError, match="no split 'test'"):
        translation_splits(spec, {k: v for k, v in _hub_fixture().items() if k != "test"})
    with pytest.raises(DataError, match="unreachable"):  # conftest sets HF_HUB_OFFLINE
        load_wmt14(spec, "paper")


def test_task_spec():
    spec = get_task("wmt14")
    assert (spec.family, spec.thesis_name, spec.input_shape, spec.label_kind) == \
        ("translation", "WMT-14", "seq2seq", "text")
    assert spec.metrics == ["bleu"] and spec.hub["dataset"] == "wmt/wmt14"


# --------------------------------------------------------------------------------- BLEU
def test_bleu_hand_case():
    from leanlm.evaluation.metrics import compute

    # n-gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths (no brevity penalty): geometric mean.
    value = compute("bleu", ["the cat sat on the mat"], ["the cat sat on a mat"])
    assert value == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    # Brevity penalty exp(1 - r/c) for a hypothesis of 6 tokens against a reference of 7.
    short = compute("bleu", ["the cat sat on the mat"], ["the cat sat on the red mat"])
    precisions = 6 / 6 * 4 / 5 * 3 / 4 * 2 / 3
    assert short == pytest.approx(math.exp(1 - 7 / 6) * precisions ** 0.25)
    same = ["Das Haus ist sehr klein.", "Die zwei Häuser sind groß."]
    assert compute("bleu", same, same) == pytest.approx(1.0)


def test_bleu_needs_strings():
    from leanlm.evaluation.metrics import compute

    with pytest.raises(DataError, match="decode"):
        compute("bleu", [345], ["ein Satz"])


# --------------------------------------------------------------------------------- schedule
def test_inverse_sqrt_schedule():
    from leanlm.training.schedules import schedule_fn

    f = schedule_fn("inverse_sqrt", total_steps=100_000, warmup_steps=4000)
    assert f(0) == 0.0 and f(2000) == pytest.approx(0.5) and f(4000) == pytest.approx(1.0)
    assert f(16000) == pytest.approx(0.5)  # sqrt(4000 / 16000)
    assert schedule_fn("inverse_sqrt", 10, 0)(0) == 1.0


# --------------------------------------------------------------------------------- tokenizer, batches
GERMAN = ["Bitte eine gültige Uhrzeit eingeben.", "Dieses Feld darf nicht leer sein.", "Los geht's mit Django!"]


def test_bpe_is_deterministic_and_decodes_losslessly():
    from leanlm.training.translation_pairs import SPECIAL_TOKENS, decode_ids, encode_texts, train_bpe

    texts = lambda: iter(GERMAN * 3 + ["Enter a valid time.", "This field cannot be blank."] * 3)  # noqa: E731
    a, b = train_bpe(texts, 120), train_bpe(texts, 120)
    assert a.to_str() == b.to_str()
    assert [a.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    ids = encode_texts(a, GERMAN)
    assert decode_ids(a, torch.tensor([[*ids[0], 3, 0, 0]])) == [GERMAN[0]]


def test_encode_pairs_adds_eos_and_skips_long_pairs():
    from leanlm.training.translation_pairs import encode_pairs, encode_texts, train_bpe

    tokenizer = train_bpe(lambda: iter(GERMAN * 3), 100)
    rows = [{"source": GERMAN[1], "target": GERMAN[0]}, {"source": " ".join([GERMAN[2]] * 20), "target": GERMAN[0]}]
    pairs, skipped = encode_pairs(tokenizer, rows, max_tokens=30)
    assert len(pairs) == 1 and skipped == 1
    source, target = pairs[0]
    assert source.tolist() == [*encode_texts(tokenizer, [GERMAN[1]])[0], 3]
    assert target.tolist() == encode_texts(tokenizer, [GERMAN[0]])[0]


def test_collate_and_batches():
    from leanlm.training.translation_pairs import TranslationBatches, collate_pairs

    batch = collate_pairs([([5, 6, 3], [7, 8]), ([9, 3], [10])])
    assert batch["input_ids"].tolist() == [[5, 6, 3], [9, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["decoder_input_ids"].tolist() == [[2, 7, 8], [2, 10, 0]]
    assert batch["labels"].tolist() == [[7, 8, 3], [10, 3, -100]]
    pairs = [([4 + i, 3], [4 + i]) for i in range(10)]
    batches = TranslationBatches(pairs, batch_size=4, grad_accum=1, seed=0)
    assert torch.equal(batches(3, 0)["input_ids"], TranslationBatches(pairs, 4, 1, 0)(3, 0)["input_ids"])
    seen = torch.cat([batches(s, 0)["input_ids"][:, 0] for s in range(5)])[:10]
    assert sorted(seen.tolist()) == list(range(4, 14))  # one epoch visits every pair once


# --------------------------------------------------------------------------------- train + translate
WORDS = {"the": "das", "house": "Haus", "is": "ist", "small": "klein", "big": "groß", "old": "alt",
         "new": "neu", "red": "rot", "car": "Auto", "book": "Buch", "here": "hier", "there": "dort"}


def _tiny_task(root) -> None:
    from leanlm.io import write_jsonl

    rng = random.Random(0)
    rows = []
    for _ in range(160):
        words = rng.sample(list(WORDS), rng.randint(2, 5))
        rows.append({"source": " ".join(words) + ".", "target": " ".join(WORDS[w] for w in words) + "."})
    splits = {"train": rows[:120], "validation": rows[120:140], "test": rows[140:]}
    for split, split_rows in splits.items():
        write_jsonl(root / "data" / "tiny" / "tasks" / "wmt14" / f"{split}.jsonl",
                    [{"idx": i, **r} for i, r in enumerate(split_rows)])


def test_tiny_train_and_translate(scratch_root):
    from leanlm.runs import Run
    from leanlm.stages.finetune import TASK_RUNNERS
    from leanlm.stages.pretrain import OBJECTIVES

    _tiny_task(scratch_root)
    size = dict(n_layers=1, n_decoder_layers=1, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=32,
                type_vocab_size=0, dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5)
    config = {
        "profile": "tiny", "_params_file": "params/tiny.yaml",
        "models": {"transformer": size},
        "pretrain": {"translation": dict(steps=60, batch_size=16, grad_accum=1, seq_len=24, vocab_size=120,
                                         lr=3e-3, schedule="inverse_sqrt", warmup_steps=10, weight_decay=0.0,
                                         adam_betas=[0.9, 0.98], adam_eps=1e-9, label_smoothing=0.1,
                                         clip_norm=1.0, checkpoint_every=None, validation_rows=16,
                                         average_last_epochs=3)},
        "finetune": {"translation": dict(tasks=["wmt14"], beam_size=2, length_penalty=0.6, max_length=20,
                                         batch_size=8, max_examples=12)},
    }
    run = Run("ch3_encdec", "mhe_mul", "transformer", "translation", ("translation",),
              {"backbone": "transformer", "attention": "mhe_mul", **size}, size="transformer", tokenizer="bpe")
    record = OBJECTIVES.get("translation")().run(config, run)
    model_dir = scratch_root / "models" / "tiny" / run.run_id
    assert {"tokenizer.json", "model.safetensors", "config.json"} <= {p.name for p in model_dir.iterdir()}
    assert not (model_dir / "checkpoint").exists()
    saved = json.loads((scratch_root / "results" / "tiny" / "runs" / run.run_id / "pretrain.json").read_text())
    assert saved["task"] == "wmt14" and saved["data"]["train_pairs"] == 120
    history = [h["loss"] for h in record["history"] if "loss" in h]
    assert history[-1] < history[0]  # it learns
    assert math.isfinite(record["validation"]["translation_loss"])

    runner = TASK_RUNNERS.get("seq2seq")()
    assert runner.seeded is False
    result = runner(config, run.run_id, "translation", "wmt14", 0, None)
    assert result["primary_metric"] == "bleu" and 0.0 <= result["primary"] <= 1.0
    assert result["test_examples"] == 12 and len(result["examples"]) == 5
    assert result["bleu_signature"].startswith("nrefs:1")
    # The thesis's protocol (§3.4.4): BLEU averaged over the checkpoints of the last five epochs (here
    # three). 120 pairs in batches of 16 are 8 steps an epoch; 60 steps end epochs 6, 7 and the partial 8th.
    checkpoints = result["checkpoints"]
    assert [(c["epoch"], c["step"]) for c in checkpoints] == [(6, 48), (7, 56), (8, 60)]
    assert result["metrics"]["bleu"] == pytest.approx(sum(c["bleu"] for c in checkpoints) / 3)
    assert result["primary"] == result["metrics"]["bleu"] and result["averaged_checkpoints"] == 3
    assert sorted(p.name for p in (model_dir / "epochs").iterdir()) == ["EPOCHS.json", "epoch-6", "epoch-7"]
    listed = json.loads((model_dir / "epochs" / "EPOCHS.json").read_text())["checkpoints"]
    assert [c["dir"] for c in listed] == ["epochs/epoch-6", "epochs/epoch-7", "."]  # the last: the run's model
