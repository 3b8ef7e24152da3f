"""leanlm.share's record files against Snakemake's own naming of its metadata records (its
FilePersistence), long output paths (split into '@' folders) included, and its refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from snakemake.persistence.file import FilePersistence

from leanlm import share
from leanlm.errors import DataError


@pytest.mark.parametrize("key", ["models/smoke/ch3_encoder-mha/model.safetensors",
                                 "results/smoke/runs/" + "x" * 400 + "/glue.json"])
def test_record_names_are_snakemakes(tmp_path, key):
    max_len = 255 if "x" * 400 not in key else 64  # a short NAME_MAX forces the '@' split Snakemake does
    snakemake_like = SimpleNamespace(_fetch_max_len=lambda subject: max_len)
    theirs = FilePersistence._record_path(snakemake_like, str(tmp_path), key)
    (tmp_path / theirs).parent.mkdir(parents=True, exist_ok=True)
    assert share._decode(tmp_path / theirs, tmp_path) == key
    if max_len == 255:
        assert share._record_path(tmp_path, key) == tmp_path / theirs


def test_collect_and_restore_round_trip(tmp_path):
    built, clone = tmp_path / "built", tmp_path / "clone"
    key = "models/smoke/run/model.safetensors"
    for root in (built, clone):
        (root / key).parent.mkdir(parents=True)
        (root / key).write_bytes(b"weights")
    other = "models/paper/run/model.safetensors"  # another profile's record stays behind
    record = {"rule": "pretrain", "params": ["p"], "endtime": 1_700_000_000.5, "incomplete": False}
    (built / share.METADATA).mkdir(parents=True)
    for k in (key, other):
        share._record_path(built / share.METADATA, k).write_text(json.dumps(record))
    records = share.collect_records(built, "smoke")
    assert list(records) == [key]
    (clone / "results" / "smoke").mkdir(parents=True)
    share.records_file(clone, "smoke").write_text(json.dumps(records))
    assert share.restore_records(clone, "smoke") == 1
    assert json.loads(share._record_path(clone / share.METADATA, key).read_text()) == record
    assert (clone / key).stat().st_mtime == record["endtime"]


def test_refusals_name_what_is_missing(tmp_path):
    with pytest.raises(DataError, match="metadata is missing"):
        share.collect_records(tmp_path, "smoke")
    (tmp_path / share.METADATA).mkdir(parents=True)
    with pytest.raises(DataError, match="nothing trained to share"):
        share.collect_records(tmp_path, "smoke")
    with pytest.raises(DataError, match="SNAKEMAKE_RECORDS.json is missing"):
        share.restore_records(tmp_path, "smoke")
