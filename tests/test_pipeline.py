"""The whole DAG on a tiny scale, offline: Snakemake + DVC data stages on fake wheels, pretraining,
fine-tuning, aggregation, rendering, analytic outputs and the PDF. Then incremental reruns, read from
Snakemake's own dry-run job list:

- nothing changed -> nothing runs;
- data files touched (as `dvc checkout`/`dvc pull` does) -> nothing runs;
- one model's configuration changed -> that model's pretrain and fine-tune, aggregation, rendering;
- one table template changed -> that table's rendering (and the PDF that includes it);
- one fine-tuning runner's code changed -> the fine-tuning jobs that run it, no pretraining;
- one chapter's renderer changed -> that chapter's tables only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fake_wheels import pin_fake_wheels, write_fake_wheels
from leanlm import forkserver

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


# One experiment per backbone with the runs PRR/PEoP need (SHA, MHA) and MHE-MUL; every task family
# with one task per input shape, so each pretraining objective and task runner runs end to end.
TINY_MATRIX = {
    "ch3_encoder": ("bert", "mlm", ["glue", "superglue", "squad"], ["sha", "mha", "mhe_mul"]),
    "ch3_decoder": ("gpt2", "causal_lm", ["glue", "lm"], ["sha", "mha"]),
    "ch3_encdec": ("transformer", "translation", ["translation"], ["sha", "mha"]),
}


def _tiny_profile(params: Path) -> None:
    matrix = {}
    for name, (backbone, objective, families, variants) in TINY_MATRIX.items():
        matrix[name] = {"chapter": 3, "title": name, "backbone": backbone, "objective": objective,
                        "finetune": families, "runs": {v: {"attention": v} for v in variants}}
        if backbone == "transformer":
            matrix[name]["tokenizer"] = "bpe"
    # The tiny experiments replace their namesakes in ch3.yaml; the rest of the matrix stays defined
    # (the paper profile's dry run and the analytic items read it) but the smoke profile lists only these.
    ch3 = params / "experiments" / "ch3.yaml"
    ch3.write_text(yaml.safe_dump({**yaml.safe_load(ch3.read_text()), **matrix}, sort_keys=False))
    _claims_of_tiny_matrix(params / "claims.yaml", matrix)
    path = params / "smoke.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["experiments"] = list(TINY_MATRIX)
    doc["seeds"] = [0]
    doc["data"]["tokenizer"]["vocab_size"] = 600
    doc["data"]["tasks"].update(max_train_examples=48, max_eval_examples=24)
    small = dict(n_layers=1, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_position=64)
    doc["models"] = {"bert": {**doc["models"]["bert"], **small},
                     "gpt2": {**doc["models"]["gpt2"], **small},
                     "transformer": {**doc["models"]["transformer"], **small, "n_decoder_layers": 1}}
    for objective in ("mlm", "causal_lm", "translation"):
        doc["pretrain"][objective].update(steps=6, batch_size=8, seq_len=32, warmup_steps=1, checkpoint_every=3)
    doc["pretrain"]["translation"]["vocab_size"] = 300
    tasks = {"glue": ["sst2", "stsb", "mrpc"], "superglue": ["copa", "multirc"], "squad": ["squad_v2"]}
    for family, names in tasks.items():
        doc["finetune"][family].update(tasks=names, epochs=1, batch_size=16, max_seq_len=32)
    doc["finetune"]["squad"].update(max_seq_len=64, doc_stride=16)
    doc["finetune"]["lm"].update(tasks=["ptb"], max_length=32, stride=16, max_tokens=500)
    doc["finetune"]["translation"].update(max_examples=8, max_length=24, beam_size=2)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _claims_of_tiny_matrix(path: Path, tiny: dict) -> None:
    """params/claims.yaml cut to the parts whose runs the tiny experiments define (the loader rightly
    refuses a claim naming a run the matrix lacks, and the tiny ch3 experiments lack most variants)."""
    known = {f"{e}-{r}" for e, x in tiny.items() for r in x["runs"]}
    known |= {f"{e}-{r}" for name in ("ch2.yaml", "ch4.yaml")
              for e, x in yaml.safe_load((path.parent / "experiments" / name).read_text()).items() for r in x["runs"]}

    def runs_of(side):
        if isinstance(side, str):
            return [side]
        return [v for k, v in side.items() if k in ("run", "peop", "sha", "timing")] + list(side.get("prr", []))

    doc = yaml.safe_load(path.read_text())
    preconditions = doc.get("preconditions", {})

    def checkable(name, part):  # a precondition whose runs (for this part's experiment) the matrix defines
        experiment = runs_of(part["a"])[0].split("-", 1)[0] if runs_of(part["a"]) else None
        sides = [preconditions[name][k] for k in ("a", "b", "varies") if k in preconditions[name]]
        runs = [r.replace("{experiment}", str(experiment)) for side in sides for r in runs_of(side)]
        return set(runs) <= known

    kept = []
    for claim in doc["claims"]:
        parts = claim.pop("parts", None) or [{"a": a, "b": b} for a, b in claim.pop("pairs")]
        thesis = claim.pop("thesis", None) or [None] * len(parts)
        required = claim.pop("requires", [])
        pairs = [(p, t) for p, t in zip(parts, thesis) if set(runs_of(p["a"]) + runs_of(p["b"])) <= known]
        if pairs:
            for part, _ in pairs:
                names = [n for n in [*required, *part.pop("requires", [])] if checkable(n, part)]
                if names:
                    part["requires"] = names
            claim["parts"] = [p for p, _ in pairs]
            if any(t is not None for _, t in pairs):
                claim["thesis"] = [t or [None, None] for _, t in pairs]
            kept.append(claim)
    path.write_text(yaml.safe_dump({"preconditions": preconditions, "claims": kept}, sort_keys=False))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", root / ".dvc" / "config")
    shutil.copytree(ROOT / "params", root / "params")
    # workflow/leanlm is copied for DVC's dependency hashes, and it is the code that runs (PYTHONPATH below), so
    # the tests can edit a module and read from the dry run which jobs its code fingerprint reruns.
    for sub in ("rules", "schemas", "templates", "profiles", "report", "leanlm"):
        shutil.copytree(ROOT / "workflow" / sub, root / "workflow" / sub, ignore=shutil.ignore_patterns("__pycache__"))
    _tiny_profile(root / "params")
    write_fake_wheels(root / "cache" / "packages")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    env = {
        **os.environ,
        "LEANLM_ROOT": str(root),
        "LEANLM_CACHE": str(root / "cache"),
        "PYTHONPATH": str(root / "workflow"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **pin_fake_wheels(root / "cache" / "packages"),
    }
    return root, env


def snakemake(project, *args, check=True):
    root, env = project
    # The limit is generous: the tiny DAG takes about 3 min on 2 idle cores, several times that on a loaded
    # shared machine.
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=1800,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout + proc.stderr


def planned_jobs(project) -> dict[str, int]:
    """Rule -> job count from a dry run's 'Job stats' table (empty when nothing is to be done)."""
    return _job_counts(snakemake(project, "-n"))


def _job_counts(out: str) -> dict[str, int]:
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1]
    counts = {}
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


def planned_wildcards(project, rule: str) -> list[str]:
    return _job_wildcards(snakemake(project, "-n"), rule)


def _job_wildcards(out: str, rule: str) -> list[str]:
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", out)
    return [
        re.search(r"wildcards: (.*)", b).group(1)
        for b in blocks
        if re.match(rf"(?:local)?rule {rule}:", b.strip()) and "wildcards:" in b
    ]


@pytest.fixture(scope="module")
def build_log(project):
    return snakemake(project)


@pytest.fixture(scope="module")
def built(project, build_log):
    return project


def test_jobs_run_through_the_warm_leanlm(project, build_log):
    """Every job of the local run was forked from the fork server (leanlm.forkserver), none refused: each
    job's log (logs/smoke/...) ends with the usage its forked command reported; the data job ran one command
    per stage it builds (fetch, corpus, tokenizer), each task set's job one."""
    root, _ = project
    assert "leanlm: fork server ready" in build_log
    logs = sorted((root / "logs" / "smoke").rglob("*.log"))
    assert len(logs) > 20
    for log in logs:
        lines = log.read_text().splitlines()
        assert not any("not using the fork server" in line for line in lines), log
        assert lines and forkserver.parse_usage(lines[-1]), log
    data = (root / "logs" / "smoke" / "data.log").read_text().splitlines()
    assert sum(1 for line in data if forkserver.parse_usage(line)) == 3


def test_full_run_renders_tables_from_real_runs(built):
    root, _ = built
    tables = root / "paper_tables" / "smoke"
    for name in ("table_3_1.tex", "table_3_1.csv", "table_3_5.tex", "table_3_4.csv", "table_3_13.csv",
                 "figure_3_1.pdf", "figure_3_1.png"):
        assert (tables / name).stat().st_size > 0, name
    if shutil.which("pdflatex"):
        assert (tables / "tables.pdf").read_bytes()[:4] == b"%PDF"
    for name in ("table_3_2.csv", "table_3_3.csv"):  # decoder and encoder-decoder tables
        assert (tables / name).stat().st_size > 0, name
    t31 = pd.read_csv(tables / "table_3_1.csv")
    assert list(t31["attention"]) == ["SHA", "MHA", "MHE-MUL"]
    # parameter counts come from the trained models: MHE adds 3 n d_h per block to SHA
    counts = dict(zip(t31["attention"], t31["params_attention"]))
    assert counts["MHE-MUL"] - counts["SHA"] == 3 * 2 * 16
    runs = pd.read_csv(root / "results" / "smoke" / "all_runs.csv")
    assert set(runs["task"]) == {"sst2", "stsb", "mrpc", "copa", "multirc", "squad_v2", "ptb", "wmt14"}
    assert set(runs["family"]) == {"glue", "superglue", "squad", "lm", "translation"}
    assert (root / "models" / "smoke" / "ch3_encoder-mha" / "model.safetensors").exists()
    # the pretraining checkpoints were cleaned up once the final model was saved
    assert not (root / "models" / "smoke" / "ch3_encoder-mha" / "checkpoint").exists()


def test_claims_verdicts_from_the_runs(built, build_log):
    """The claims stage runs after aggregation and ends the run with its summary; the real runners keep
    per-example data, so the parts this matrix can test resample examples."""
    root, _ = built
    claims = pd.read_csv(root / "paper_tables" / "smoke" / "claims.csv")
    assert "leanlm: claims at profile smoke:" in build_log
    ran = claims[claims["verdict"] != "not run"]
    # e.g. MHA vs SHA on GLUE (ch3_mha_best_absolute): both runs are in the tiny matrix; judged on examples, or
    # untestable where the tiny MHA is at chance (its reference preconditions), with the reason
    mha_sha = ran[ran["comparison"] == "ch3_encoder-mha vs ch3_encoder-sha on glue"]
    assert len(mha_sha) == 1, ran["comparison"].tolist()
    row = mha_sha.iloc[0]
    assert row["basis"] == "examples" or (row["verdict"] == "untestable"
                                          and row["preconditions"].startswith("ch3_reference_predictions_vary:")
                                          and "Precondition ch3_reference" in row["reason"]), row.to_dict()
    # per-question F1: judged on examples, or untestable through MHE's precondition (MHA above SHA on SQuAD:
    # failing at this size, or unchecked where the tiny matrix fine-tunes MHA on no SQuAD), with the reason
    squad = ran[ran["comparison"] == "ch3_encoder-mhe_mul vs ch3_encoder-sha on squad (squad_v1)"]
    assert len(squad) == 1, ran["comparison"].tolist()
    row = squad.iloc[0]
    assert row["basis"] == "examples" or (row["verdict"] == "untestable"
                                          and row["preconditions"].startswith("ch3_mha_beats_sha:")
                                          and "Precondition ch3_mha_beats_sha" in row["reason"]), row.to_dict()
    # every runner keeps per-example data that gives back its reported metric (MultiRC's grouped ones aside)
    from test_per_example import observed

    for run_id, family in (("ch3_encoder-sha", "glue"), ("ch3_encoder-sha", "superglue"),
                           ("ch3_encoder-sha", "squad"), ("ch3_decoder-sha", "lm"), ("ch3_encdec-sha", "translation")):
        doc = json.loads((root / "results" / "smoke" / "runs" / run_id / f"{family}.json").read_text())
        for result in doc["results"]:
            if result["task"] == "multirc":
                continue
            for metric, value in result["metrics"].items():
                if metric in result["per_example"]["statistics"]:
                    assert observed(result["per_example"], metric) == pytest.approx(value, rel=1e-4, abs=1e-6), \
                        (run_id, result["task"], metric)
    assert set(ran["verdict"]) <= {"supported", "contradicted", "inconclusive", "untestable"}
    # runs of experiments the tiny profile leaves out (chapters 2 and 4) are "not run", with the reason
    absent = claims[claims["chapter"] == 2]
    assert len(absent) and set(absent["verdict"]) == {"not run"}
    assert absent["reason"].str.contains("not run at this profile").all()
    if shutil.which("pdflatex"):
        assert (root / "paper_tables" / "smoke" / "claims.tex").is_file()


def test_report_page_is_built_last_and_snakemake_report_captions_every_output(built, build_log):
    """report.html (the pipeline's last rule) holds the run's tables and figures; `snakemake --report` files
    every table (its CSV) and figure (its PNG) under its chapter with the thesis's number and caption."""
    import json

    root, _ = built
    jobs = re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", build_log)
    assert jobs[-2:] == ["report_page", "all"], jobs[-4:]
    assert "\nleanlm: paper_tables/smoke/report.html  the report: open it in a browser" in build_log  # the run's end
    page = (root / "paper_tables" / "smoke" / "report.html").read_text(encoding="utf-8")
    assert 'id="table_3_1"' in page and 'id="figure_3_1"' in page and "data:image/png;base64," in page
    snakemake(built, "--report", "snakemake_report.html")
    text = (root / "snakemake_report.html").read_text(encoding="utf-8")
    results = json.loads(re.search(r"var results = (\{.*?\});\n", text).group(1))
    shown = {Path(path).name: entry for path, entry in results.items()}
    outputs = [p for p in (root / "paper_tables" / "smoke").iterdir()
               if p.suffix == ".png" or (p.suffix == ".csv" and p.with_suffix(".tex").is_file() and p.stem != "claims")]
    assert outputs and {p.name for p in outputs} <= set(shown), sorted({p.name for p in outputs} - set(shown))
    for output in outputs:
        entry = shown[output.name]
        assert entry["labels"]["output"].startswith(("Table ", "Figure ")) or "not in the thesis" in entry["labels"]["output"]
        assert entry["labels"]["what"] and entry["caption"], output.name
    assert {"report.html", "tables.pdf"} <= set(shown) or not shutil.which("pdflatex")
    categories = re.search(r"var categories = (\{.*?\});\n", text).group(1)
    assert "Chapter 3: Multi-head embedding attention (MHE)" in categories


def test_noop_rerun_runs_nothing(built):
    assert planned_jobs(built) == {}


def test_touched_data_does_not_retrigger_training(built):
    root, _ = built
    for path in (root / "data" / "smoke").rglob("*"):
        os.utime(path)  # what `dvc checkout` / `dvc pull` does to file times
    assert planned_jobs(built) == {}


def test_changed_model_reruns_only_its_jobs(built):
    root, _ = built
    matrix = root / "params" / "experiments" / "ch3.yaml"
    original = matrix.read_text()
    doc = yaml.safe_load(original)
    doc["ch3_encoder"]["runs"]["mhe_mul"]["n_layers"] = 2
    matrix.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        jobs = planned_jobs(built)
        # its pretraining, its three task families, then its experiment's aggregation (and all_runs.csv, which
        # the claims read) and what is rendered from it
        assert (jobs.pop("pretrain"), jobs.pop("finetune"), jobs.pop("aggregate"), jobs.pop("all_runs")) == (1, 3, 1, 1)
        assert planned_wildcards(built, "aggregate") == ["profile=smoke, experiment=ch3_encoder"]
        assert set(jobs) <= {"render_table", "claims", "pdf", "report_page", "all"} and jobs["render_table"] >= 2, jobs
        assert jobs["claims"] == 1, jobs  # the claims read the runs' results
        assert [w for w in planned_wildcards(built, "pretrain")] == ["profile=smoke, run_id=ch3_encoder-mhe_mul"]
    finally:
        matrix.write_text(original)
    assert planned_jobs(built) == {}


def test_changed_template_reruns_only_that_rendering(built):
    root, _ = built
    template = root / "workflow" / "templates" / "table_3_4.tex.j2"
    original = template.read_text()
    template.write_text(original + "\n")
    jobs = planned_jobs(built)
    expected = {"analytic_table": 1, "report_page": 1, "all": 1, **({"pdf": 1} if shutil.which("pdflatex") else {})}
    assert jobs == expected, jobs
    assert planned_wildcards(built, "analytic_table") == ["profile=smoke, item=table_3_4"]
    snakemake(built)
    assert planned_jobs(built) == {}


def _planned_after_editing(built, module: str) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The dry run's job counts and wildcards per rule after a comment is added to leanlm/<module>; the edit
    is undone afterwards, and then nothing is to be done again."""
    root, _ = built
    path = root / "workflow" / "leanlm" / module
    original = path.read_text()
    path.write_text(original + "\n# an edit that changes the file's content, not what it does\n")
    try:
        out = snakemake(built, "-n")
        jobs = _job_counts(out)
        wildcards = {rule: _job_wildcards(out, rule) for rule in jobs}
    finally:
        path.write_text(original)
    assert planned_jobs(built) == {}
    return jobs, wildcards


def test_changed_runner_reruns_its_finetuning_and_no_pretraining(built):
    jobs, wildcards = _planned_after_editing(built, "runners/span_qa.py")
    # SQuAD's runner: the squad family of each encoder run, then aggregation and what is rendered from it
    assert "pretrain" not in jobs and jobs.pop("finetune") == 3, jobs
    assert {w.split("family=")[1] for w in wildcards["finetune"]} == {"squad"}, wildcards["finetune"]
    assert set(jobs) <= {"aggregate", "all_runs", "render_table", "render_figure", "claims", "pdf", "report_page",
                         "all"}, jobs


def test_changed_chapter_renderer_reruns_only_that_chapters_tables(built):
    jobs, wildcards = _planned_after_editing(built, "reporting/ch3/tasks.py")  # Tables 3.5-3.10
    assert set(jobs) <= {"render_table", "pdf", "report_page", "all"} and jobs["render_table"] >= 2, jobs
    tables = {w.split("table=")[1] for w in wildcards["render_table"]}
    assert tables <= {f"table_3_{i}" for i in range(5, 11)}, tables
    # ch. 2's tables module: here (a ch. 3 profile) only its hyperparameter Tables 2.4 and 2.5 are built
    jobs, wildcards = _planned_after_editing(built, "reporting/ch2/tables.py")
    assert set(jobs) <= {"params_table", "pdf", "report_page", "all"}, jobs
    assert {w.split("table=")[1] for w in wildcards["params_table"]} == {"table_2_4", "table_2_5"}


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=leanlm-test", "-c", "user.email=test@leanlm.invalid", *args],
                   cwd=cwd, check=True, capture_output=True, text=True)


def _run(cwd, env, *cmd):
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def _sharing_blocks() -> list[list[str]]:
    """docs/sharing.md's sharing section: its bash blocks, one list of command lines each (comments dropped)."""
    section = (ROOT / "docs" / "sharing.md").read_text(encoding="utf-8").split("## Sharing through DVC", 1)[1].split("\n## ", 1)[0]
    blocks = [part.split("```", 1)[0] for part in section.split("```bash")[1:]]
    return [[line.split("  #", 1)[0].strip() for line in block.strip().splitlines()] for block in blocks]


def test_shared_through_a_dvc_remote_reruns_only_changed_settings(built, tmp_path_factory):
    """docs/sharing.md's sharing commands as written (the remote's path aside): `leanlm share push` to a real DVC
    remote (a local directory), the commit, a fresh `git clone`, `leanlm share pull`: the clone's dry run
    lists nothing, a bare `dvc pull` and the data-only pull succeed; one model's setting changed lists
    exactly its dependants."""
    root, env = built
    # dvc and leanlm from the environment running the tests (the dev extra installs DVC), whether or not
    # it is activated: `make test` runs .venv/bin/python without putting .venv/bin on PATH.
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
           "GIT_AUTHOR_NAME": "leanlm-test", "GIT_AUTHOR_EMAIL": "test@leanlm.invalid",
           "GIT_COMMITTER_NAME": "leanlm-test", "GIT_COMMITTER_EMAIL": "test@leanlm.invalid"}
    assert shutil.which("dvc", path=env["PATH"]), "DVC is missing: install the dev extra"
    (add_remote, push, commit), (pull, dry_run) = _sharing_blocks()
    readme = (ROOT / "docs" / "sharing.md").read_text(encoding="utf-8")
    data_only = "dvc pull fetch@smoke corpus@smoke tokenizer@smoke tasks@smoke"
    assert "A bare `dvc pull` pulls everything shared" in readme and data_only in readme.replace("\n", " ")
    bash = lambda cwd, e, line: _run(cwd, e, "bash", "-c", f"set -e; {line}")  # noqa: E731
    remote = tmp_path_factory.mktemp("dvc_remote")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    shutil.copy(ROOT / ".dvc" / ".gitignore", root / ".dvc" / ".gitignore")
    smoke_stages = [f"{stage}@smoke" for stage in ("fetch", "corpus", "tokenizer", "tasks")]
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "built")
    bash(root, env, add_remote.replace("/mnt/shared/leanlm-dvc", str(remote)))
    _git(root, "commit", "-qam", "the remote")  # "commit .dvc/config"
    assert not (root / "dvc.lock").exists()  # the run built the data without DVC: it locked nothing
    out = bash(root, env, push)
    assert "models/smoke.dvc" in out and "results/smoke.dvc" in out
    # the push registered the profile and locked its data as built: DVC finds it up to date beside
    # Snakemake's .snakemake_timestamp markers (DVC-ignored)
    assert any((root / "data" / "smoke").rglob(".snakemake_timestamp"))
    assert "up to date" in _run(root, env, "dvc", "status", *smoke_stages)
    bash(root, env, commit)
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert planned_jobs(built) == {}  # `dvc add` left the building machine's outputs as Snakemake knows them

    clone = tmp_path_factory.mktemp("clone") / "project"
    _git(root.parent, "clone", "-q", str(root), str(clone))
    clone_env = {**env, "LEANLM_ROOT": str(clone), "PYTHONPATH": str(clone / "workflow")}
    assert not (clone / "models" / "smoke").exists()
    bash(clone, clone_env, pull)
    assert (clone / "models" / "smoke" / "ch3_encoder-mha" / "model.safetensors").is_file()
    assert (clone / "results" / "smoke" / "runs" / "ch3_encoder-mha" / "pretrain.json").is_file()
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    in_clone = (clone, clone_env)
    assert "Nothing to be done" in bash(clone, clone_env, dry_run)
    assert "up to date" in _run(clone, clone_env, "dvc", "status", *smoke_stages)
    bash(clone, clone_env, data_only)
    bash(clone, clone_env, "dvc pull")  # bare: every stage the clone defines is locked (dvc_stages.yaml)
    stages_file = clone / "dvc_stages.yaml"  # what it guards against: a defined stage never run (paper's)
    kept = stages_file.read_text()
    stages_file.write_text(kept.replace("staged: [smoke]", "staged: [smoke, paper]"))
    unlocked = subprocess.run(["dvc", "pull"], cwd=clone, env=clone_env, capture_output=True, text=True)
    assert unlocked.returncode != 0 and "data/paper/raw" in unlocked.stdout + unlocked.stderr
    stages_file.write_text(kept)
    assert planned_jobs(in_clone) == {}

    matrix = clone / "params" / "experiments" / "ch3.yaml"
    doc = yaml.safe_load(matrix.read_text())
    doc["ch3_encoder"]["runs"]["mhe_mul"]["n_layers"] = 2
    matrix.write_text(yaml.safe_dump(doc, sort_keys=False))
    jobs = planned_jobs(in_clone)
    assert (jobs.pop("pretrain"), jobs.pop("finetune"), jobs.pop("aggregate"), jobs.pop("all_runs")) == (1, 3, 1, 1)
    assert set(jobs) <= {"render_table", "claims", "pdf", "report_page", "all"} and jobs["render_table"] >= 2, jobs
    assert planned_wildcards(in_clone, "pretrain") == ["profile=smoke, run_id=ch3_encoder-mhe_mul"]
