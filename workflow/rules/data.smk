# Data stages are DVC's (dvc.yaml: fetch -> corpus -> tokenizer -> tasks); this rule runs them.
# Downstream rules take the data as ancient() inputs and the data params as params, so a `dvc pull`
# or `dvc checkout` (which resets file times) never re-triggers training, while a changed data
# setting does.

DATA_PARAMS = {"source": CFG["source"], "data": CFG["data"], "tasks": {f: s["tasks"] for f, s in CFG["finetune"].items()}}
DATA_DIRS = [f"data/{PROFILE}/{d}" for d in ("raw", "corpus", "tokenizer", "tasks")]


rule data:
    output:
        [directory(d) for d in DATA_DIRS],
    params:
        data=DATA_PARAMS,
        code=code_version("data"),
    shell:
        "dvc repro --single-item fetch@{PROFILE} corpus@{PROFILE} tokenizer@{PROFILE} tasks@{PROFILE}"


def data_inputs(*names):
    return [ancient(f"data/{PROFILE}/{name}") for name in names]
