"""The translation task family (WMT-14 en-de, §3.4.2): hub loader and packaged stand-in.

Rows are ``{"idx", "source", "target"}``: English source, German target (the thesis translates
English to German).

- hub (:func:`load_wmt14`): ``wmt/wmt14``, config ``de-en``, whose rows are
  ``{"translation": {"de": ..., "en": ...}}``. train = WMT-14 train (4.5M pairs), validation =
  newstest2013, test = newstest2014 (where the thesis reports BLEU). :func:`map_translation_rows` and
  :func:`translation_splits` do the schema mapping on rows from anywhere (tests feed fixtures);
  only :func:`load_wmt14` touches the network.
- packaged (:func:`build_wmt14`): real English-German pairs from the German gettext catalogues that
  the Django wheel ships (``django/**/locale/de/LC_MESSAGES/*.po``: msgid = English, msgstr = German,
  written by Django's translators). Entries that are format strings or carry placeholders or markup
  are dropped, so every pair is plain text in both languages; see :func:`plain_pair`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from leanlm.data.families.glue_standins import BuildContext, Rows, StandInSources, _empty
from leanlm.data.sources import hub
from leanlm.data.sources.packaged import DJANGO_CATALOGUES, catalogue_raw_name
from leanlm.data.task_sources import TaskFamily
from leanlm.data.tasks import TaskSpec
from leanlm.data.text import clean_text, dedupe_key
from leanlm.errors import DataError
from leanlm.registry import Registry

STANDINS: Registry = Registry("packaged translation stand-in")  # task -> builder (FAMILY)


class Message(NamedTuple):
    """One gettext entry: English ``msgid``, German ``msgstr`` (singular form), its flags."""

    msgid: str
    msgstr: str
    flags: frozenset[str]
    context: str | None


_KEYWORD = re.compile(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(\".*\")\s*$")
_CONTINUATION = re.compile(r"^(\".*\")\s*$")


def _po_string(literal: str, where: str) -> str:
    # PO strings use C escapes (\" \n \t \\), which Python string literals read the same way.
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        raise DataError(f"{where}: malformed PO string {literal[:80]!r}") from None
    if not isinstance(value, str):
        raise DataError(f"{where}: malformed PO string {literal[:80]!r}")
    return value


def parse_po(text: str, name: str = "catalogue") -> list[Message]:
    """Every translated entry of a PO file, in file order (header, obsolete and untranslated dropped).

    Plural entries give their singular pair (msgid -> msgstr[0]). ``fuzzy`` entries are dropped:
    their translation is a machine guess awaiting review.
    """
    messages: list[Message] = []
    entry: dict[str, Any] = {}
    flags: set[str] = set()
    field: str | None = None

    def flush() -> None:
        nonlocal entry, flags, field
        msgid = entry.get("msgid")
        msgstr = entry.get("msgstr", entry.get("msgstr[0]"))
        if msgid and msgstr and "fuzzy" not in flags:
            messages.append(Message(msgid, msgstr, frozenset(flags), entry.get("msgctxt")))
        entry, flags, field = {}, set(), None

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{name}, line {number}"
        if not line:
            flush()
        elif line.startswith("#~"):
            continue  # obsolete entry
        elif line.startswith("#,"):
            if "msgid" in entry:
                flush()
            flags.update(f.strip() for f in line[2:].split(","))
        elif line.startswith("#"):
            if "msgid" in entry and field is not None and field.startswith("msgstr"):
                flush()
        elif match := _KEYWORD.match(line):
            keyword, _, literal = match.groups()
            if keyword in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in entry):
                flush()  # a new entry without a blank line between
            field = keyword
            entry[field] = _po_string(literal, where)
        elif match := _CONTINUATION.match(line):
            if field is None:
                raise DataError(f"{where}: a continuation string outside an entry: {line[:80]!r}")
            entry[field] += _po_string(match.group(1), where)
        else:
            raise DataError(f"{where}: not a PO line: {line[:80]!r}")
    flush()
    return messages


# Placeholders and markup: printf (%s, %(name)s, %d), brace formats, HTML tags and entities.
_NOT_PLAIN = re.compile(r"%(\([^)]*\))?[-#0 +]*\d*(\.\d+)?[sdifrxXeEgGcu%]|\{[^}]*\}|<[^>]*>|&\w+;")
_FORMAT_FLAGS = {"python-format", "python-brace-format", "c-format", "javascript-format"}


def plain_pair(message: Message) -> tuple[str, str] | None:
    """(English, German) of a catalogue entry fit to translate as a sentence, else None.

    Dropped: format strings and anything with placeholders or markup (the target would contain
    tokens that are not German), entries whose two sides are the same string after cleaning (names
    of languages and the like: copies, not translations), and sides without a letter.
    """
    if message.flags & _FORMAT_FLAGS:
        return None
    english, german = (clean_text(" ".join(s.split())) for s in (message.msgid, message.msgstr))
    if not english or not german or _NOT_PLAIN.search(english) or _NOT_PLAIN.search(german):
        return None
    if english.casefold() == german.casefold():
        return None
    if not any(c.isalpha() for c in english) or not any(c.isalpha() for c in german):
        return None
    return english, german


def read_django_pairs(raw_dir: Path) -> list[tuple[str, str]]:
    """English-German pairs of every packaged catalogue, first occurrence of each English text kept."""
    pairs, seen = [], set()
    for catalogue, files in DJANGO_CATALOGUES.items():
        for file in files:
            path = Path(raw_dir) / catalogue_raw_name(catalogue, file)
            if not path.is_file():
                raise DataError(f"{path} is missing: the fetch stage has not run for this profile (or "
                                f"ran before the translation stand-in existed); run `leanlm data fetch "
                                f"--params params/<profile>.yaml` again")
            for message in parse_po(path.read_text(encoding="utf-8"), path.name):
                pair = plain_pair(message)
                if pair is not None and dedupe_key(pair[0]) not in seen:
                    seen.add(dedupe_key(pair[0]))
                    pairs.append(pair)
    return pairs


@STANDINS.register("wmt14")
def build_wmt14(src: StandInSources, ctx: BuildContext) -> Rows:
    """English -> German catalogue pairs, split by the English text (no source shared between splits)."""
    out = _empty()
    for english, german in read_django_pairs(src.raw_dir):
        out[ctx.split(english)].append({"source": english, "target": german})
    return out


# --- hub ----------------------------------------------------------------------------------------

def _languages(spec: TaskSpec) -> tuple[str, str]:
    hub = spec.hub
    try:
        return hub["source"], hub["target"]
    except KeyError:
        raise DataError(f"params/tasks/translation.yaml, key {spec.family}.{spec.name}.hub needs "
                        f"source and target language codes (e.g. source: en, target: de)") from None


def map_translation_rows(spec: TaskSpec, rows: Iterable[Mapping[str, Any]]) -> tuple[list[dict], int]:
    """Hub rows ``{"translation": {lang: text, ...}}`` -> ``{"idx", "source", "target"}``.

    idx is the row's position in its split (WMT has no ids). Pairs with an empty side (a few exist
    in the web-crawled part of WMT-14) are dropped; returns (rows, number dropped). Text is kept
    verbatim apart from surrounding whitespace: it is the benchmark.
    """
    source, target = _languages(spec)
    out, dropped = [], 0
    for position, row in enumerate(rows):
        pair = row.get("translation") if isinstance(row, Mapping) else None
        if not isinstance(pair, Mapping) or source not in pair or target not in pair:
            raise DataError(f"{spec.hub['dataset']}/{spec.hub.get('config')}: row {position} is not "
                            f"{{'translation': {{'{source}': ..., '{target}': ...}}}}: {str(row)[:200]}")
        src_text, tgt_text = str(pair[source]).strip(), str(pair[target]).strip()
        if not src_text or not tgt_text:
            dropped += 1
            continue
        out.append({"idx": position, "source": src_text, "target": tgt_text})
    return out, dropped


def translation_splits(spec: TaskSpec, dataset: Mapping[str, Iterable[Mapping[str, Any]]]) -> tuple[dict, dict]:
    """train/validation/test rows from a hub ``DatasetDict`` (or a dict of row lists), with provenance."""
    hub = spec.hub
    splits, dropped = {}, 0
    for ours in ("train", "validation", "test"):
        theirs = hub.get(ours, ours)
        if theirs not in dataset:
            raise DataError(f"{hub['dataset']}/{hub.get('config')} has no split {theirs!r}; splits: "
                            f"{', '.join(dataset)}")
        splits[ours], n = map_translation_rows(spec, dataset[theirs])
        dropped += n
    provenance = {
        "dataset": hub["dataset"],
        "config": hub.get("config"),
        "direction": f"{hub['source']}->{hub['target']}",
        **{ours: hub.get(ours, ours) for ours in ("train", "validation", "test")},
        "note": "validation = newstest2013, test = newstest2014 (the thesis reports test BLEU)",
        "empty_pairs_dropped": dropped,
    }
    return splits, provenance


def load_wmt14(spec: TaskSpec, profile: str):
    """WMT-14 from the hub: a ``DatasetDict`` in the hub schema (see ``hub.load_hub_dataset``)."""
    return hub.load_hub_dataset(spec, profile)


def load_translation_family(spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    # WMT-14 has its official test set (newstest2014): nothing is held out of train.
    return translation_splits(spec, load_wmt14(spec, profile))


def iter_pairs(rows: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """(source, target) of task rows (what tokenizer training and batching read)."""
    for row in rows:
        yield row["source"], row["target"]


FAMILY = TaskFamily("translation", standins=STANDINS, hub=load_translation_family)
