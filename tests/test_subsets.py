"""Named subsets of a profile's experiments (key ``subsets``; ``--config subset=<name>`` for Snakemake,
``--subset <name>`` for leanlm): the signal profile's ``cpu`` subset is how the CPU claims run is made
(docs/results/signal-cpu/). A subset narrows which runs are made and nothing else, so each job it runs is
the job the whole profile runs (same settings, so the same outputs and no rerun when the whole profile
follows)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import shlex
from pathlib import Path

import pytest
import yaml

from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.runs import finetune_settings, pretrain_settings, runs
from params_files import edit_yaml
from test_faults import snakemake, workflow_project

ROOT = Path(__file__).resolve().parents[1]
SIGNAL = ROOT / "params" / "signal.yaml"
# What the CPU subset covers (params/signal.yaml): the runs 2 cores can bring into the claims' regime in 90
# minutes. ch3_decoder without its GLUE fine-tuning (the claims there are on perplexity).
CPU_SUBSET = ["ch4_uniform", "ch3_decoder"]
CPU_RUNS = {"ch4_uniform": {"standard", "mlp", "approximate", "non_approximate"},
            "ch3_decoder": {"sha", "mha", "mhe_add", "mhe_mul"}}
CPU_FAMILIES = {"ch3_decoder": ("lm",)}


def test_a_subset_narrows_the_runs_and_changes_no_setting():
    whole = load_config(SIGNAL)
    cpu = load_config(SIGNAL, subset="cpu")
    assert cpu["experiments"] == CPU_SUBSET and cpu["subset"] == "cpu"
    whole_runs = {r.run_id: r for r in runs(whole, with_replicas=True)}
    cpu_runs = runs(cpu, with_replicas=True)
    assert {r.experiment for r in cpu_runs} == set(CPU_SUBSET)
    assert {r.run_id for r in runs(cpu)} == {f"{e}-{n}" for e, names in CPU_RUNS.items() for n in names}
    for run in cpu_runs:
        whole_run = whole_runs[run.run_id]
        # the same run, its fine-tuning families narrowed where the subset says so, and nowhere else
        assert run.finetune == CPU_FAMILIES.get(run.experiment, whole_run.finetune)
        assert set(run.finetune) <= set(whole_run.finetune)
        assert run == dataclasses.replace(whole_run, finetune=run.finetune)
        assert pretrain_settings(cpu, run) == pretrain_settings(whole, whole_run)
        for family in run.finetune:
            assert finetune_settings(cpu, run, family) == finetune_settings(whole, whole_run, family)
    # the whole profile still fine-tunes the decoders on GLUE: the subset changed nothing in the file's matrix
    assert {r.finetune for r in whole_runs.values() if r.experiment == "ch3_decoder"} == {("glue", "lm")}


def test_a_subset_keeping_a_family_its_experiment_lacks_is_refused(scratch_root):
    path = scratch_root / "params" / "signal.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["subsets"]["cpu"] = ["ch4_uniform", {"ch3_decoder": ["lm", "squad"]}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.cpu keeps ch3_decoder's fine-tuning families squad, which the "
                                          r"experiment does not have \(it has: glue, lm\)"):
        load_config(path)  # refused even when no subset is chosen
    doc["subsets"]["cpu"] = ["ch4_uniform", {"ch3_decoder": []}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"key subsets\.cpu\.1\.ch3_decoder = \[\]: \[\] should be non-empty"):
        load_config(path)  # the schema: a narrowed experiment keeps at least one family
    # named twice: refused, whichever order (no silent winner)
    for twice in (["ch3_decoder", {"ch3_decoder": ["lm"]}], [{"ch3_decoder": ["lm"]}, {"ch3_decoder": ["glue"]}]):
        doc["subsets"]["cpu"] = twice
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        with pytest.raises(ConfigError, match=r"subsets\.cpu names experiment ch3_decoder twice"):
            load_config(path)
    # the translation objective pretrains on a task of its families: never narrowed
    doc["subsets"]["cpu"] = [{"ch3_encdec": ["translation"]}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"narrows ch3_encdec's fine-tuning families, but its objective "
                                          r"'translation' pretrains on a task of those families"):
        load_config(path)


def test_narrowed_families_keep_the_matrix_order_and_their_variants(scratch_root):
    from leanlm.config import _narrowed

    experiment = {"finetune": ["glue", "lm", "squad"], "finetune_variants": {"glue": "glue_ch2", "squad": "x"}}
    assert _narrowed(experiment, ["squad", "glue"]) == {"finetune": ["glue", "squad"],
                                                         "finetune_variants": {"glue": "glue_ch2", "squad": "x"}}
    assert _narrowed(experiment, ["lm"]) == {"finetune": ["lm"], "finetune_variants": {}}
    assert _narrowed({"finetune": ["glue", "lm"]}, ["lm"]) == {"finetune": ["lm"]}


@pytest.mark.slow
def test_a_table_of_a_family_the_subset_leaves_out_is_not_rendered(scratch_root):
    """Tables 3.9 and 3.10 read only the decoders' GLUE results (tables.yaml ``families``): the cpu subset,
    which leaves that family out, does not render them; Table 3.2 (GLUE and perplexity) still renders."""
    root = workflow_project(scratch_root)
    # An earlier whole-profile run left Table 3.9 in the folder: tables.pdf must not compile it in.
    (root / "paper_tables" / "signal").mkdir(parents=True, exist_ok=True)
    (root / "paper_tables" / "signal" / "table_3_9.tex").write_text("% an earlier run's table\n")
    proc = snakemake(root, "--configfile", "params/signal.yaml", "--config", "subset=cpu", "-n", "-p")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    rendered = set(re.findall(r"leanlm render .*?--table (\S+)", out))
    assert "table_3_2" in rendered and not {"table_3_9", "table_3_10"} & rendered, sorted(rendered)
    if shutil.which("pdflatex"):  # the pdf rule is in the DAG only where pdflatex is
        pdf = re.search(r"leanlm pdf .*$", out, flags=re.M).group(0)
        parts = set(re.findall(r"paper_tables/signal/(\S+?)\.tex", pdf))
        assert "table_3_2" in parts and "claims" in parts and not {"table_3_9", "table_3_10"} & parts, pdf
    finetuned = set(re.findall(r"leanlm finetune .*?--run (ch3_decoder-\S+) --family (\S+)", out))
    assert finetuned and {family for _, family in finetuned} == {"lm"}


def test_the_cpu_subset_holds_the_claims_it_is_for():
    """Every run the named claims and preconditions compare is in the subset (a renamed run would drop a
    claim silently): the regime's two preconditions, the uniform MLP and Non-approximate claims, and MHE
    vs SHA on perplexity."""
    from leanlm.claims.spec import load_claims

    cpu_runs = {r.run_id for r in runs(load_config(SIGNAL, subset="cpu"))}
    wanted = ["ch4_uniform_mlp_perplexity_below_random", "ch4_uniform_mlp_near_random_nlu",
              "ch4_uniform_non_approximate_near_random"]
    claims = {c.id: c for c in load_claims()}
    for claim_id in wanted:
        assert claims[claim_id].runs <= cpu_runs, claim_id
    assert {"ch4_uniform-standard", "ch4_uniform-mlp", "ch3_decoder-mha", "ch3_decoder-sha"} <= cpu_runs
    mhe_vs_sha = [p for p in claims["ch3_mhe_above_sha_everywhere"].parts if p.family == "lm"]
    assert mhe_vs_sha and all(set(p.a.runs) | set(p.b.runs) <= cpu_runs for p in mhe_vs_sha)


def test_an_unknown_subset_names_the_file_and_the_known_ones():
    with pytest.raises(ConfigError, match=r"signal\.yaml: no subset 'gpu' \(key subsets\); known: cpu"):
        load_config(SIGNAL, subset="gpu")
    with pytest.raises(ConfigError, match="defines none"):
        load_config(ROOT / "params" / "smoke.yaml", subset="cpu")


def test_a_subset_outside_the_experiments_is_refused(scratch_root):
    path = scratch_root / "params" / "signal.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["experiments"].remove("ch3_decoder")
    doc.pop("pretrain_seeds", None)  # which would name it too (its own check: tests/test_pretrain_seeds.py)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.cpu lists ch3_decoder, which the profile's experiments do not"):
        load_config(path)  # refused even when no subset is chosen


def readme_signal_command() -> list[str]:
    """docs/profiles.md's command for the CPU subset, as printed there."""
    lines = [line for line in (ROOT / "docs" / "profiles.md").read_text().splitlines()
             if line.startswith("snakemake ") and "--config subset=cpu" in line]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


@pytest.mark.slow
def test_the_readme_command_runs_the_subset_and_passes_it_to_every_job(scratch_root):
    """docs/profiles.md's command verbatim (a dry run: the real run is docs/results/signal-cpu/)."""
    root = workflow_project(scratch_root)
    command = readme_signal_command()
    assert command[0] == "snakemake"
    proc = snakemake(root, *command[1:], "-n", "-p")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    pretrained = set(re.findall(r"leanlm pretrain .*?--run (\S+)", out))
    # every pretraining replica too (signal's pretrain_seeds)
    expected = {r.run_id for r in runs(load_config(root / "params" / "signal.yaml", subset="cpu"), with_replicas=True)
                if not r.evaluate_from}
    assert pretrained == expected
    commands = [line for line in out.splitlines() if re.search(r"leanlm (pretrain|finetune|aggregate|claims|render) ", line)]
    assert commands and all(re.search(r"--params \S*params/signal\.yaml --subset cpu ", c) for c in commands), commands[:3]


def test_a_subset_can_narrow_an_experiments_runs(scratch_root):
    """``{experiment: {runs: [...], families: [...]}}``: only those runs (and families), each the same run
    with the same settings as in the whole profile."""
    path = scratch_root / "params" / "signal.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["subsets"]["few"] = [{"ch4_uniform": {"runs": ["standard", "mlp"]}},
                             {"ch3_decoder": {"runs": ["sha", "mha"], "families": ["lm"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    whole = {r.run_id: r for r in runs(load_config(path))}
    few = load_config(path, subset="few")
    chosen = runs(few)
    assert sorted(r.run_id for r in chosen) == ["ch3_decoder-mha", "ch3_decoder-sha",
                                                "ch4_uniform-mlp", "ch4_uniform-standard"]
    for run in chosen:
        assert run == dataclasses.replace(whole[run.run_id], finetune=run.finetune)
        assert pretrain_settings(few, run) == pretrain_settings(load_config(path), whole[run.run_id])
    assert {r.finetune for r in chosen if r.experiment == "ch3_decoder"} == {("lm",)}
    assert {r.finetune for r in chosen if r.experiment == "ch4_uniform"} == {whole["ch4_uniform-mlp"].finetune}


def test_a_subset_naming_an_unknown_run_or_dropping_an_evaluated_model_is_refused(scratch_root):
    path = scratch_root / "params" / "signal.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["subsets"]["cpu"] = [{"ch4_uniform": {"runs": ["standard", "gpt"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.cpu keeps ch4_uniform's runs gpt, which the experiment "
                                          r"does not have \(it has: standard, mlp, "):
        load_config(path)  # refused even when no subset is chosen
    # ch4_skip evaluates ch4_hybrid's models: a subset keeping a skip run keeps the model it evaluates
    doc["subsets"]["cpu"] = [{"ch4_hybrid": {"runs": ["mlp"]}}, {"ch4_skip": {"runs": ["mlp", "approximate"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.cpu keeps ch4_skip-approximate, which evaluates the model of "
                                          r"ch4_hybrid-approximate, and leaves that run out"):
        load_config(path)  # refused even when no subset is chosen
    doc["subsets"]["cpu"] = [{"ch4_uniform": {"families": ["lm_eval"], "runs": []}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"key subsets\.cpu\.0\.ch4_uniform\.runs = \[\]: \[\] should be non-empty"):
        load_config(path)  # the schema: a narrowed experiment keeps at least one run


def test_a_subset_can_keep_the_pretraining_replicas_of_some_runs_only(scratch_root):
    """``replicas: [...]``: of the kept runs, only those get the further pretraining replicas of
    ``pretrain_seeds`` (each the same job as in the whole profile); ``[]``: none."""
    path = scratch_root / "params" / "signal.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pretrain_seeds"] = {"seeds": [0, 1, 2], "experiments": ["ch3_decoder", "ch4_uniform", "ch4_hybrid", "ch4_skip"]}
    doc["subsets"]["few"] = [{"ch4_uniform": {"runs": ["standard", "mlp"], "replicas": []}},
                             {"ch3_decoder": {"runs": ["sha", "mha", "mhe_add"], "families": ["lm"],
                                              "replicas": ["sha", "mha"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    whole = {r.run_id: r for r in runs(load_config(path), with_replicas=True)}
    few = runs(load_config(path, subset="few"), with_replicas=True)
    assert [r.run_id for r in few] == ["ch4_uniform-standard", "ch4_uniform-mlp",
                                       "ch3_decoder-sha", "ch3_decoder-sha@p1", "ch3_decoder-sha@p2",
                                       "ch3_decoder-mha", "ch3_decoder-mha@p1", "ch3_decoder-mha@p2",
                                       "ch3_decoder-mhe_add"]
    for run in few:
        assert run == dataclasses.replace(whole[run.run_id], finetune=run.finetune)
    # a replica kept must name a run the subset runs
    doc["subsets"]["few"] = [{"ch3_decoder": {"runs": ["sha"], "replicas": ["mha"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.few keeps the pretraining replicas of ch3_decoder's runs mha, "
                                          r"which it does not run \(it runs: sha\)"):
        load_config(path)
    # ch4_skip's replicas evaluate ch4_hybrid's replicas: keeping the first keeps the second
    doc["subsets"]["few"] = [{"ch4_hybrid": {"runs": ["mlp"], "replicas": []}}, {"ch4_skip": {"runs": ["mlp"]}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"subsets\.few keeps the pretraining replicas of ch4_skip-mlp, which evaluate "
                                          r"ch4_hybrid-mlp's replicas, but not those of ch4_hybrid-mlp"):
        load_config(path)  # refused even when no subset is chosen
    with pytest.raises(ConfigError, match=r"subsets\.few keeps the pretraining replicas of ch4_skip-mlp"):
        load_config(path, subset="cpu")  # ... and when another, sound one is


def _reevaluating(scratch_root) -> Path:
    """The scratch signal profile, whose ch4_uniform gains ``standard_again``: a run evaluating ``standard``'s
    model, named bare (a run of its own experiment, as leanlm.runs resolves ``evaluate_from``)."""
    edit_yaml(scratch_root / "params" / "experiments" / "ch4.yaml", lambda doc: doc["ch4_uniform"]["runs"].update(
        standard_again={"attention": "standard", "evaluate_from": "standard"}))
    return scratch_root / "params" / "signal.yaml"


def test_a_bare_evaluate_from_is_resolved_in_its_own_experiment(scratch_root):
    """A subset keeping both the run and the model it evaluates by bare name is sound; one dropping that
    model, or its replicas, is refused naming the run's full id."""
    path = _reevaluating(scratch_root)

    def subset(keep):
        edit_yaml(path, lambda doc: doc["subsets"].update(few=[{"ch4_uniform": keep}]))

    subset({"runs": ["standard", "standard_again"]})
    few = {r.run_id: r for r in runs(load_config(path, subset="few"), with_replicas=True)}
    assert few["ch4_uniform-standard_again"].evaluate_from == "ch4_uniform-standard"
    assert few["ch4_uniform-standard_again@p2"].evaluate_from == "ch4_uniform-standard@p2"
    subset({"runs": ["standard_again"]})
    with pytest.raises(ConfigError, match=r"subsets\.few keeps ch4_uniform-standard_again, which evaluates the model "
                                          r"of ch4_uniform-standard, and leaves that run out"):
        load_config(path)
    subset({"runs": ["standard", "standard_again"], "replicas": ["standard_again"]})
    with pytest.raises(ConfigError, match=r"subsets\.few keeps the pretraining replicas of ch4_uniform-standard_again, "
                                          r"which evaluate ch4_uniform-standard's replicas, but not those of "
                                          r"ch4_uniform-standard"):
        load_config(path)


@pytest.mark.parametrize("seeds", [None, {"seeds": [0, 1, 2], "experiments": ["ch3_decoder"]}])
def test_replicas_of_an_experiment_pretrained_once_are_refused(scratch_root, seeds):
    """A subset's ``replicas`` narrows the replicas ``pretrain_seeds`` makes: on an experiment that key does
    not list (or in a profile without it) there are none, and the subset would silently mean nothing."""
    path = scratch_root / "params" / "signal.yaml"
    edit_yaml(path, lambda doc: doc.pop("pretrain_seeds") if seeds is None else doc.update(pretrain_seeds=seeds))
    why = "the profile has no pretrain_seeds" if seeds is None else "pretrain_seeds.experiments does not list it"
    with pytest.raises(ConfigError, match=rf"signal\.yaml: subsets\.cpu sets replicas for ch4_uniform, whose runs are "
                                          rf"pretrained once \({why}\)"):
        load_config(path)
