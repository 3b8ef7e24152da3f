# The data stages (fetch -> corpus -> tokenizer -> tasks, dvc.yaml) run here as `leanlm data <stage>`, the
# commands DVC's stages run, and write only under data/<profile>/ (git-ignored): a run leaves git clean. DVC
# registers and locks a profile's data when it is shared (`leanlm share push`, which commits the stages into
# dvc.lock and dvc_stages.yaml; leanlm/share.py), and `dvc repro` still builds it the same way.
# A job depends on the data it reads only: `data` writes raw/, corpus/ and the tokenizer, which pretraining
# reads; one `data_tasks_<set>` rule per task set writes that family's task folders (tasks/<task>/; the
# lm-eval families share tasks/lm_eval/), which its fine-tuning reads.
# Downstream rules take the data as ancient() inputs and the data params as params, so a `dvc pull`
# or `dvc checkout` (which resets file times) never re-triggers training, while a changed data
# setting does.

from leanlm.data.plumbing.dvc_profiles import check_dvc_profile
from leanlm.data.pretrain_data import NAMED_KINDS, STAGE_CODE
from leanlm.data.plumbing.stages import task_sets
from leanlm.data.tasks import get_task
from leanlm.runs import named_pretrain_data

# Named pretraining data (data.corpora, data.tokenizers: ch. 4's SlimPajama and Pythia BPE) is left out
# of DATA_PARAMS: only the runs that read it take it as params (run_data_params), so changing it reruns
# those runs and nothing else. data.hub_mirror is where the hub's data is read from, not what it is.
DATA_PARAMS = {"source": CFG["source"],
               "data": {k: v for k, v in CFG["data"].items() if k not in NAMED_KINDS and k != "hub_mirror"},
               "tasks": {f: s["tasks"] for f, s in CFG["finetune"].items()}}
DATA_DIRS = [f"data/{PROFILE}/{d}" for d in ("raw", "corpus", "tokenizer")]
TASK_SETS = task_sets(CFG)  # set name -> its families and its folders under tasks/
SET_OF_FAMILY = {family: name for name, entry in TASK_SETS.items() for family in entry["families"]}
NAMED_DATA = {kind: CFG["data"].get(kind) or {} for kind in NAMED_KINDS}
check_dvc_profile(CFG, "dvc.yaml")  # its stages fetch@<profile> ... (and corpora@, tokenizers@) must exist


def data_inputs(*names):
    return [ancient(f"data/{PROFILE}/{name}") for name in names]


def task_set_inputs(*families):
    """The task folders of ``families``' task sets (ancient, as data_inputs)."""
    names = dict.fromkeys(SET_OF_FAMILY[f] for f in families if f in SET_OF_FAMILY)
    return data_inputs(*(f"tasks/{d}" for name in names for d in TASK_SETS[name]["dirs"]))


# The translation objective trains on a seq2seq task's train split (leanlm.objectives.translation.
# translation_task: the first its families list): its pretraining job depends on those families' task sets.
TASK_TRAINED_OBJECTIVES = ("translation",)


def run_task_inputs(wildcards):
    """The task sets run ``wildcards.run_id``'s pretraining reads (none but for TASK_TRAINED_OBJECTIVES)."""
    run = RUNS[wildcards.run_id]
    if run.objective not in TASK_TRAINED_OBJECTIVES:
        return []
    return task_set_inputs(*(f for f in run.finetune if any(
        get_task(t).input_shape == "seq2seq" for t in CFG["finetune"].get(f, {}).get("tasks", []))))


# The rehearsal (data.hub_fixtures: true) reads the hub from a mirror made of generated fixtures in the hub's
# schemas (leanlm.data.fixtures); this rule writes it before any data stage reads it. Other profiles have no
# such rule: their mirror, if any, is filled from the hub by `leanlm mirror`.
FIXTURE_MIRROR = [CFG["data"]["hub_mirror"]] if CFG["data"].get("hub_fixtures") else []

if FIXTURE_MIRROR:

    localrules:
        hub_fixtures,

    rule hub_fixtures:
        output:
            directory(FIXTURE_MIRROR[0]),
        params:
            code=code_of("leanlm.data.fixtures"),  # the fixture modules and all they import
        log:
            f"logs/{PROFILE}/hub_fixtures.log",
        benchmark:
            f"benchmarks/{PROFILE}/hub_fixtures.tsv",
        shell:
            "leanlm fixtures {P} --out {output:q} > {log:q} 2>&1"


rule data:
    input:
        FIXTURE_MIRROR,
    output:
        [directory(d) for d in DATA_DIRS],
    params:
        data=DATA_PARAMS,
        code=code_version("data"),
    log:
        f"logs/{PROFILE}/data.log",
    benchmark:
        f"benchmarks/{PROFILE}/data.tsv",
    shell:
        "leanlm data fetch {P} > {log:q} 2>&1 && leanlm data corpus {P} >> {log:q} 2>&1 && "
        "leanlm data tokenizer {P} >> {log:q} 2>&1"


# One rule per task set (built from raw/ and the corpus: the stand-ins and lm-eval's local tasks), with the
# settings of its families' tasks as params: a changed GLUE task list rebuilds GLUE's sets only.
# The shell command names its families through params: Snakemake runs the command's expression when the job
# runs, after this loop has ended, so it must not read the loop's variables.
for _name, _entry in TASK_SETS.items():

    rule:
        name: f"data_tasks_{_name}"
        input:
            FIXTURE_MIRROR,
            data_inputs("raw", "corpus"),
        output:
            [directory(f"data/{PROFILE}/tasks/{d}") for d in _entry["dirs"]],
        params:
            data={"source": CFG["source"], "data": {"tasks": CFG["data"]["tasks"]},
                  "tasks": {f: CFG["finetune"][f]["tasks"] for f in _entry["families"]}},
            code=code_version("data"),
            families=_entry["families"],
        log:
            f"logs/{PROFILE}/data_tasks_{_name}.log",
        benchmark:
            f"benchmarks/{PROFILE}/data_tasks_{_name}.tsv",
        localrule: True
        shell:
            "leanlm data tasks {P} --family {params.families:q} > {log:q} 2>&1"


# One rule per kind (DVC stage corpora@<profile> / tokenizers@<profile>, leanlm.data.pretrain_data), so a
# changed tokenizer never deletes and re-streams the corpus. Defined only for profiles that name any.
# The corpora rule declares one folder per corpus (the stage writes them all), so that a pretraining job
# depends on the corpora it reads only: SlimPajama for ch. 4, and FineWeb for FixedSeqQK's fixed text.
if NAMED_DATA["corpora"]:

    localrules:  # hub downloads: where Snakemake runs (compute nodes may have no network)
        data_corpora,

    rule data_corpora:
        input:
            FIXTURE_MIRROR,
        output:
            [directory(f"data/{PROFILE}/corpora/{name}") for name in NAMED_DATA["corpora"]],
        params:
            corpora=NAMED_DATA["corpora"],
            code=code_version(*STAGE_CODE["corpora"]),
        log:
            f"logs/{PROFILE}/data_corpora.log",
        benchmark:
            f"benchmarks/{PROFILE}/data_corpora.tsv",
        shell:
            "leanlm data corpora {P} > {log:q} 2>&1"


if NAMED_DATA["tokenizers"]:

    localrules:
        data_tokenizers,

    rule data_tokenizers:
        input:
            FIXTURE_MIRROR,
        output:
            directory(f"data/{PROFILE}/tokenizers"),
        params:
            tokenizers=NAMED_DATA["tokenizers"],
            code=code_version(*STAGE_CODE["tokenizers"]),
        log:
            f"logs/{PROFILE}/data_tokenizers.log",
        benchmark:
            f"benchmarks/{PROFILE}/data_tokenizers.tsv",
        shell:
            "leanlm data tokenizers {P} > {log:q} 2>&1"


def run_data_inputs(wildcards):
    """The named corpus folders (its pretraining corpus, FixedSeqQK's text corpus) and tokenizer folder of a
    run whose experiment names them and whose model reads them (none otherwise)."""
    run = RUNS[wildcards.run_id]
    corpora = dict.fromkeys(name for name in (run.pretrain_corpus, run.fixed_text_corpus) if name)
    return data_inputs(*(f"corpora/{name}" for name in corpora), *(["tokenizers"] if run.pretrain_tokenizer else []))


def run_data_params(wildcards):
    """DATA_PARAMS, plus for a run with named data the settings of exactly the corpora and tokenizer it reads."""
    named = named_pretrain_data(CFG, RUNS[wildcards.run_id])
    return {**DATA_PARAMS, "pretrain_data": named} if named else DATA_PARAMS
