# Data stages are DVC's (dvc.yaml: fetch -> corpus -> tokenizer -> tasks); this rule runs them.
# Downstream rules take the data as ancient() inputs and the data params as params, so a `dvc pull`
# or `dvc checkout` (which resets file times) never re-triggers training, while a changed data
# setting does.

from leanlm.data.plumbing.dvc_profiles import check_dvc_profile
from leanlm.data.pretrain_data import NAMED_KINDS, STAGE_CODE
from leanlm.runs import named_pretrain_data

# Named pretraining data (data.corpora, data.tokenizers: ch. 4's SlimPajama and Pythia BPE) is left out
# of DATA_PARAMS: only the runs that read it take it as params (run_data_params), so changing it reruns
# those runs and nothing else. data.hub_mirror is where the hub's data is read from, not what it is.
DATA_PARAMS = {"source": CFG["source"],
               "data": {k: v for k, v in CFG["data"].items() if k not in NAMED_KINDS and k != "hub_mirror"},
               "tasks": {f: s["tasks"] for f, s in CFG["finetune"].items()}}
DATA_DIRS = [f"data/{PROFILE}/{d}" for d in ("raw", "corpus", "tokenizer", "tasks")]
NAMED_DATA = {kind: CFG["data"].get(kind) or {} for kind in NAMED_KINDS}
check_dvc_profile(CFG, "dvc.yaml")  # its stages fetch@<profile> ... (and corpora@, tokenizers@) must exist

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
        # register: DVC defines the profile's stages from now on (dvc_stages.yaml, leanlm.data.plumbing.dvc_profiles)
        "leanlm data register {P} > {log:q} 2>&1 && "
        "dvc repro --single-item fetch@{PROFILE:q} corpus@{PROFILE:q} tokenizer@{PROFILE:q} tasks@{PROFILE:q} >> {log:q} 2>&1"


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
            "leanlm data register {P} > {log:q} 2>&1 && dvc repro --single-item corpora@{PROFILE:q} >> {log:q} 2>&1"


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
            "leanlm data register {P} > {log:q} 2>&1 && dvc repro --single-item tokenizers@{PROFILE:q} >> {log:q} 2>&1"


def data_inputs(*names):
    return [ancient(f"data/{PROFILE}/{name}") for name in names]


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
