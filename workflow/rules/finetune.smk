# One job per (pretrained model, task family); the seeds run inside the job.


rule finetune:
    input:
        data_inputs("tasks", "tokenizer"),
        model=model_of,
    output:
        "results/{profile}/runs/{run_id}/{family}.json",
    params:
        finetune=lambda w: CFG["finetune"][w.family],
        seeds=CFG["seeds"],
        data=DATA_PARAMS,
        run=lambda w: {"evaluate_from": RUNS[w.run_id].evaluate_from, "skip": RUNS[w.run_id].skip_simple_layers},
        code=code_version("modeling", "training", "evaluation", "data/tasks", "hashing"),
    threads: 1
    resources:
        gpu=1 if PROFILE == "paper" else 0,
    shell:
        "OMP_NUM_THREADS={threads} leanlm finetune {P} --run {wildcards.run_id} --family {wildcards.family}"
