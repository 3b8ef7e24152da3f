"""The ``rehearsal`` profile: the paper profile's jobs at tiny size, over a fixture mirror in the hub's schemas.

- Snakemake's own dry runs of ``params/paper.yaml`` and ``params/rehearsal.yaml`` (both offline) plan the
  same jobs: the same rules with the same wildcards (every pretrained run, every (run, family) fine-tuning,
  every table and figure), the rehearsal adding only ``hub_fixtures``, the rule that writes its mirror;
- the two profiles run the same tasks, hub datasets, corpora, tokenizers and protocols (full train splits,
  per-task evaluation steps, SQuAD's printed warmup, BLEU over the last epochs, lm fine-tuning per seed);
- the fixtures (:mod:`leanlm.data.fixtures`) have the hub's own features: written out here from the
  hub's dataset cards / ``dataset_info`` (not taken from the fixture modules), are deterministic, and the
  tokenizer and checkpoint folders load with transformers' Auto classes as the hub's do.

The end-to-end run of the rehearsal is part of `.ci/run` (beside `make test`; docs/rehearsal.md), not a unit test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from datasets import ClassLabel, Features, Sequence, Translation, Value  # noqa: E402

from leanlm.config import load_config  # noqa: E402
from leanlm.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
S, I32 = Value("string"), Value("int32")
BOOL = ClassLabel(names=["False", "True"])

# The hub's features (datasets' dataset_info of each config on huggingface.co), written out independently.
HUB_FEATURES = {
    ("nyu-mll/glue", "cola"): {"sentence": S, "label": ClassLabel(names=["unacceptable", "acceptable"]), "idx": I32},
    ("nyu-mll/glue", "sst2"): {"sentence": S, "label": ClassLabel(names=["negative", "positive"]), "idx": I32},
    ("nyu-mll/glue", "mrpc"): {"sentence1": S, "sentence2": S,
                               "label": ClassLabel(names=["not_equivalent", "equivalent"]), "idx": I32},
    ("nyu-mll/glue", "qqp"): {"question1": S, "question2": S,
                              "label": ClassLabel(names=["not_duplicate", "duplicate"]), "idx": I32},
    ("nyu-mll/glue", "stsb"): {"sentence1": S, "sentence2": S, "label": Value("float32"), "idx": I32},
    ("nyu-mll/glue", "mnli"): {"premise": S, "hypothesis": S,
                               "label": ClassLabel(names=["entailment", "neutral", "contradiction"]), "idx": I32},
    ("nyu-mll/glue", "qnli"): {"question": S, "sentence": S,
                               "label": ClassLabel(names=["entailment", "not_entailment"]), "idx": I32},
    ("nyu-mll/glue", "rte"): {"sentence1": S, "sentence2": S,
                              "label": ClassLabel(names=["entailment", "not_entailment"]), "idx": I32},
    ("aps/super_glue", "boolq"): {"question": S, "passage": S, "idx": I32, "label": BOOL},
    ("aps/super_glue", "cb"): {"premise": S, "hypothesis": S, "idx": I32,
                               "label": ClassLabel(names=["entailment", "contradiction", "neutral"])},
    ("aps/super_glue", "copa"): {"premise": S, "choice1": S, "choice2": S, "question": S, "idx": I32,
                                 "label": ClassLabel(names=["choice1", "choice2"])},
    ("aps/super_glue", "multirc"): {"paragraph": S, "question": S, "answer": S,
                                    "idx": {"paragraph": I32, "question": I32, "answer": I32}, "label": BOOL},
    ("aps/super_glue", "rte"): {"premise": S, "hypothesis": S, "idx": I32,
                                "label": ClassLabel(names=["entailment", "not_entailment"])},
    ("aps/super_glue", "wic"): {"word": S, "sentence1": S, "sentence2": S, "start1": I32, "start2": I32, "end1": I32,
                                "end2": I32, "idx": I32, "label": BOOL},
    ("aps/super_glue", "wsc.fixed"): {"text": S, "span1_index": I32, "span2_index": I32, "span1_text": S,
                                      "span2_text": S, "idx": I32, "label": BOOL},
    ("rajpurkar/squad", None): {"id": S, "title": S, "context": S, "question": S,
                                "answers": Sequence({"text": S, "answer_start": I32})},
    ("rajpurkar/squad_v2", None): {"id": S, "title": S, "context": S, "question": S,
                                   "answers": Sequence({"text": S, "answer_start": I32})},
    ("wmt/wmt14", "de-en"): {"translation": Translation(languages=["de", "en"])},
    ("Salesforce/wikitext", "wikitext-103-raw-v1"): {"text": S},
    ("ptb-text-only/ptb_text_only", "penn_treebank"): {"sentence": S},
}
HUB_SPLITS = {("nyu-mll/glue", "mnli"): {"train", "validation_matched", "validation_mismatched", "test_matched",
                                         "test_mismatched"},
              ("rajpurkar/squad", None): {"train", "validation"}, ("rajpurkar/squad_v2", None): {"train", "validation"}}
HUB_CORPUS_FEATURES = {
    "wikimedia/wikipedia": {"id": S, "url": S, "title": S, "text": S},
    "bookcorpus/bookcorpus": {"text": S},
    "cerebras/SlimPajama-627B": {"text": S, "meta": {"redpajama_set_name": S}},
    "HuggingFaceFW/fineweb": {"text": S, "id": S, "dump": S, "url": S, "date": S, "file_path": S, "language": S,
                              "language_score": Value("float64"), "token_count": Value("int64")},
}
# transformers' tokenizer classes of the hub folders (their tokenizer_config.json's tokenizer_class)
HUB_TOKENIZER_CLASSES = {"google-bert/bert-base-uncased": "BertTokenizer", "FacebookAI/roberta-base": "RobertaTokenizer",
                         "EleutherAI/pythia-160m": "GPTNeoXTokenizer"}


# --- the job lists ------------------------------------------------------------------------------------


def _project(root: Path) -> Path:
    """What a dry run reads, copied (no outputs: every job is planned)."""
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "params", root / "params")
    shutil.copytree(ROOT / "profiles", root / "profiles")
    for sub in ("rules", "schemas", "templates", "profiles"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub)
    return root


def _dry_run(root: Path, params: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job Snakemake's own dry run plans, offline (the hub unreachable)."""
    env = {**os.environ, "LEANLM_ROOT": str(root), "PYTHONPATH": str(ROOT / "workflow"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HTTPS_PROXY": "http://127.0.0.1:9"}  # a hub call could not succeed
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", params],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"dry run of {params} failed:\n{out[-4000:]}"
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        match = re.match(r"(?:local)?rule (\w+):", block.strip())
        if match:
            wildcards = re.search(r"wildcards: (.*)", block)
            text = wildcards.group(1) if wildcards else ""
            jobs.append((match.group(1), re.sub(r"profile=(paper|rehearsal)", "profile=*", text)))
    assert jobs, out[-2000:]
    return jobs


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    root = _project(tmp_path_factory.mktemp("project"))
    return {name: _dry_run(root, f"params/{name}.yaml") for name in ("paper", "rehearsal")}


def test_rehearsal_plans_the_paper_profiles_jobs(dry_runs):
    paper, rehearsal = dry_runs["paper"], dry_runs["rehearsal"]
    assert len(set(paper)) == len(paper) and len(set(rehearsal)) == len(rehearsal)
    assert [job for job in rehearsal if job[0] == "hub_fixtures"] == [("hub_fixtures", "")]
    assert set(rehearsal) - {("hub_fixtures", "")} == set(paper)
    rules = {rule for rule, _ in paper}
    assert {"data", "data_corpora", "data_tokenizers", "pretrain", "finetune", "render_table", "render_figure",
            "analytic_table", "analytic_figure", "params_table", "aggregate", "claims", "all"} <= rules
    families = {re.search(r"family=(\w+)", w).group(1) for rule, w in paper if rule == "finetune"}
    assert families == {"glue", "superglue", "squad", "lm", "translation", "lm_eval", "analysis"}
    assert sum(rule == "pretrain" for rule, _ in paper) > 100  # the whole matrix, CANINE-C's hub checkpoint included
    assert ("pretrain", "profile=*, run_id=ch2_hashformers-canine_c") in set(rehearsal)


def test_rehearsal_renders_every_table_and_figure_of_the_paper(dry_runs):
    from leanlm.io import read_yaml

    tables = read_yaml(ROOT / "params" / "tables.yaml")
    planned = {re.search(r"(?:table|item)=([\w.]+)", w).group(1) for rule, w in dry_runs["rehearsal"]
               if rule in ("render_table", "render_figure", "analytic_table", "analytic_figure", "params_table")}
    every = set(tables)  # results, analytic and params tables and figures
    assert every <= planned, sorted(every - planned)


# --- the profiles ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiles():
    return {name: load_config(ROOT / "params" / f"{name}.yaml") for name in ("paper", "rehearsal")}


def test_same_experiments_tasks_and_hub_data(profiles):
    from leanlm.data.fixtures import needed

    paper, rehearsal = profiles["paper"], profiles["rehearsal"]
    assert rehearsal["source"] == paper["source"] == "hub"
    assert rehearsal["experiments"] == paper["experiments"]
    assert {f: s["tasks"] for f, s in rehearsal["finetune"].items()} == {f: s["tasks"] for f, s in paper["finetune"].items()}
    for key in ("tokenizer", "corpora", "tokenizers"):
        names = {k: (v.get("name"), v.get("dataset"), v.get("config"), v.get("split"), v.get("kind"))
                 for k, v in ((key, paper["data"][key]),) if "kind" in v} if key == "tokenizer" else None
        if names is None:
            assert {k: (v.get("name"), v.get("dataset"), v.get("config"), v.get("split"), v.get("text_field"),
                        v.get("source_field"), v.get("vocab_multiple"))
                    for k, v in paper["data"][key].items()} == {
                k: (v.get("name"), v.get("dataset"), v.get("config"), v.get("split"), v.get("text_field"),
                    v.get("source_field"), v.get("vocab_multiple")) for k, v in rehearsal["data"][key].items()}, key
        else:
            assert {k: (v["name"], v["kind"], v["lowercase"]) for k, v in ((key, rehearsal["data"][key]),)} == {
                k: (v["name"], v["kind"], v["lowercase"]) for k, v in ((key, paper["data"][key]),)}
    want = needed(rehearsal)
    assert want == needed(paper)  # what the mirror holds is what the paper reads from the hub


def _shape(node):
    """Keys (recursively) and value types of a settings block: its structure, not its sizes."""
    if isinstance(node, dict):
        return {k: _shape(v) for k, v in node.items()}
    return "null" if node is None else "list" if isinstance(node, list) else "number" \
        if isinstance(node, (int, float)) and not isinstance(node, bool) else type(node).__name__


def test_same_protocols_and_schedule_shapes(profiles):
    paper, rehearsal = profiles["paper"], profiles["rehearsal"]
    for block in ("pretrain", "pretrain_variants", "finetune_variants", "finetune"):
        assert _shape(rehearsal[block]) == _shape(paper[block]), block
    for size, settings in paper["models"].items():  # the same sizes, and the same per-size overrides
        assert _shape(settings.get("pretrain_overrides")) == _shape(rehearsal["models"][size].get("pretrain_overrides"))
    assert set(rehearsal["models"]) == set(paper["models"])
    tasks = rehearsal["data"]["tasks"]
    assert tasks["heldout_fraction"] == paper["data"]["tasks"]["heldout_fraction"] == 0  # full train splits
    assert tasks["max_train_examples"] is tasks["max_eval_examples"] is None
    assert rehearsal["pretrain"]["translation"]["average_last_epochs"] > 1  # BLEU over the last epochs
    assert rehearsal["finetune"]["lm"]["fine_tune"] is not None and len(rehearsal["seeds"]) > 1  # per seed
    assert rehearsal["finetune"]["lm_eval"]["limit"] is paper["finetune"]["lm_eval"]["limit"] is None


def test_fixtures_need_the_hub_source_and_a_mirror(profiles, tmp_path):
    from leanlm.data.plumbing.mirror_fill import fill_mirror
    from leanlm.profile_checks import check_combinations

    config = {**profiles["rehearsal"], "source": "packaged"}
    with pytest.raises(ConfigError, match="data.hub_fixtures is true.*source: hub"):
        check_combinations(config, Path("params/rehearsal.yaml"))
    config = {**profiles["rehearsal"], "data": {**profiles["rehearsal"]["data"], "hub_mirror": None}}
    with pytest.raises(ConfigError, match="data.hub_mirror set"):
        check_combinations(config, Path("params/rehearsal.yaml"))
    with pytest.raises(ConfigError, match="leanlm fixtures --params"):
        fill_mirror(profiles["rehearsal"], tmp_path / "m")


# --- the fixtures ---------------------------------------------------------------------------------------


def test_every_dataset_fixture_has_the_hubs_features_and_is_deterministic():
    from leanlm.data.fixtures import dataset_builders

    builders = dataset_builders()
    assert set(builders) == set(HUB_FEATURES)
    for key, build in builders.items():
        data = build()
        assert set(data) == HUB_SPLITS.get(key, {"train", "validation", "test"}), key
        for split in data.values():
            assert split.features == Features(HUB_FEATURES[key]), key
            assert list(split.features) == list(HUB_FEATURES[key]), key  # the hub's column order
            assert len(split) > 0
        assert {s: d.to_dict() for s, d in build().items()} == {s: d.to_dict() for s, d in data.items()}, key


def test_benchmark_fixtures_keep_the_hubs_conventions():
    from leanlm.data.fixtures import glue, squad, superglue

    for config in glue.CONFIGS:  # GLUE's test labels are hidden
        data = glue.build(config)
        test = data["test_matched" if config == "mnli" else "test"]
        assert set(test["label"]) == {-1.0 if config == "stsb" else -1}
        assert -1 not in data["train"]["label"]
    assert set(superglue.build("copa")["test"]["label"]) == {-1}
    for dataset, unanswerable in squad.VERSIONS.items():
        data = squad.build(dataset)
        for split in ("train", "validation"):
            for row in data[split]:
                for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
                    assert row["context"][start:start + len(text)] == text
        empty = sum(not row["answers"]["text"] for row in data["validation"])
        assert (empty > 0) == unanswerable
        assert all(len(row["answers"]["text"]) == 1 for row in data["train"] if row["answers"]["text"])


def test_corpus_fixtures_have_the_hubs_features():
    from leanlm.data.fixtures import corpora

    for (dataset, _, _), build in corpora.BUILDERS.items():
        assert build().features == Features(HUB_CORPUS_FEATURES[dataset]), dataset


def test_tokenizer_and_checkpoint_folders_load_as_the_hubs(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from leanlm.data.fixtures import checkpoints, tokenizers
    from leanlm.data.tokenizer import special_token_ids

    for name, build in tokenizers.BUILDERS.items():
        build(tmp_path / name)
        assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (tmp_path / name).iterdir()}
        hf = AutoTokenizer.from_pretrained(str(tmp_path / name))
        assert type(hf).__name__.removesuffix("Fast") == HUB_TOKENIZER_CLASSES[name], name
        assert "the famous river" in hf.decode(hf("The famous river.")["input_ids"], skip_special_tokens=True).lower()
    bert = AutoTokenizer.from_pretrained(str(tmp_path / "google-bert/bert-base-uncased"))
    assert bert.tokenize("The River") == ["the", "river"]
    assert bert("a", "b")["input_ids"][0] == bert.cls_token_id and bert.sep_token_id in bert("a")["input_ids"]
    roberta = AutoTokenizer.from_pretrained(str(tmp_path / "FacebookAI/roberta-base"))
    assert special_token_ids(roberta.backend_tokenizer)["mask"] == roberta.mask_token_id
    assert [roberta.bos_token, roberta.pad_token, roberta.eos_token, roberta.unk_token] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert roberta.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    pythia = AutoTokenizer.from_pretrained(str(tmp_path / "EleutherAI/pythia-160m"))
    assert pythia.eos_token == pythia.bos_token == "<|endoftext|>" and pythia.eos_token_id == 0
    checkpoints.canine(tmp_path / "canine")
    model = AutoModel.from_pretrained(str(tmp_path / "canine"))
    assert type(model).__name__ == "CanineModel" and model.config.downsampling_rate == 4


def test_ci_runs_the_readmes_rehearsal_command():
    """docs/rehearsal.md's rehearsal command is the one `make rehearsal` runs, and `.ci/run` runs it end to end
    beside the README's test command (`make test`), failing when either fails."""
    readme = (ROOT / "docs" / "rehearsal.md").read_text(encoding="utf-8")
    section = readme.split("## Rehearsal", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(snakemake [^#\n]*?)\s+#", section).group(1)
    assert command == "snakemake --cores 2 --configfile params/rehearsal.yaml"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^rehearsal: setup\n\t(.*)$", makefile, re.M).group(1)
    assert recipe.endswith(" " + command)
    steps = [line.split("#", 1)[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert "make setup" in steps and "make test || status=$?" in steps
    assert '(cd "$copy/leanlm" && PYTHONPATH="$copy/leanlm/workflow" exec setsid -w make rehearsal VENV="$root/.venv") \\' in steps
    assert 'git clone -q "$root" "$copy/leanlm"' in steps and 'if wait "$rehearsal"; then' in steps
    assert steps[-1] == 'exit "$status"'


@pytest.mark.parametrize("test_rc, rehearsal_rc", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_ci_fails_when_the_tests_or_the_rehearsal_fail(tmp_path, test_rc, rehearsal_rc):
    """`.ci/run` itself, with `make` replaced by a stand-in that records its targets: both run, and CI
    passes only when both pass; a failed rehearsal's log ends up in CI's output."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # the rehearsal runs in a clone of it
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "ci"], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(
        "#!/usr/bin/env bash\n"
        'echo "$1" >> "$CALLS"\n'
        'case $1 in\n'
        '  rehearsal) echo "rehearsal job log line in $PWD with $2 PYTHONPATH=$PYTHONPATH"; exit "$REHEARSAL_RC";;\n'
        '  test) exit "$TEST_RC";;\n'
        "esac\n")
    (bin_dir / "make").chmod(0o755)
    calls = tmp_path / "calls"
    (tmp_path / "tmp").mkdir()
    out = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
                              "TEST_RC": str(test_rc), "REHEARSAL_RC": str(rehearsal_rc)})
    assert sorted(calls.read_text().split()) == ["rehearsal", "setup", "test"]
    assert out.returncode == (0 if test_rc == rehearsal_rc == 0 else 1)
    assert ("rehearsal job log line" in out.stderr) == bool(rehearsal_rc)
    log = (tmp_path / "logs" / "ci-rehearsal.log").read_text()
    assert f"with VENV={tmp_path}/.venv" in log and "/leanlm-ci-rehearsal." in log  # in its own clone
    assert re.search(r"in (\S+) with .* PYTHONPATH=\1/workflow$", log, re.M), log  # and its own package
    assert not list((tmp_path / "tmp").iterdir())  # the clone is removed
