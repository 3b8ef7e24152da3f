"""CITATION.cff and LICENSE (issue 26, item 6): the citation file is valid Citation File Format 1.2.0, checked
against the format's own JSON schema as its reference validator ships it (cffconvert's wheel, fetched from
PyPI), and names the thesis; the licence is the one pyproject.toml declares."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cff_schema(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("cffconvert")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(where),
                           "cffconvert==2.0.0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip download cffconvert (PyPI) failed: {done.stderr[-500:]}"
    (wheel,) = where.glob("cffconvert-2.0.0-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read("cffconvert/schemas/1.2.0/schema.json"))


def test_citation_file_is_valid_cff_and_cites_the_thesis(cff_schema):
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(cff_schema, format_checker=jsonschema.FormatChecker())
    validator.validate(citation)
    broken = {k: v for k, v in citation.items() if k != "authors"}  # the schema does refuse a bad file
    assert any("authors" in e.message for e in validator.iter_errors(broken))
    thesis = citation["preferred-citation"]
    assert thesis["type"] == "thesis" and thesis["authors"][0]["family-names"] == "Xue"
    assert thesis["title"] == "Exploring Efficient Methods for Transformer-based Foundation Language Models"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert citation["version"] == project["version"] and citation["license"] == project["license"]


def test_the_licence_file_is_the_declared_licence():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
