# One job per (pretrained model, task family); the seeds run inside the job.
# finetune_settings: the family's block with the experiment's variant laid over it (ch. 2: glue_ch2).

from functools import cache

from leanlm.runs import finetune_seeds, finetune_settings

# A fine-tuning job's code is its family's stage and its tasks' runners: the same for every run with the same
# family and tasks, so it is computed once per pair (the paper plans ~190 such jobs over ~15 pairs).
family_code = cache(lambda family, tasks: finetune_code(family, tasks))


rule finetune:
    input:
        data_inputs("tokenizer"),
        lambda w: task_set_inputs(w.family),  # the family's own task sets only
        model=model_of,
    output:
        "results/{profile}/runs/{run_id}/{family}.json",
    params:
        finetune=lambda w: finetune_settings(CFG, RUNS[w.run_id], w.family),
        seeds=lambda w: finetune_seeds(CFG, RUNS[w.run_id], w.family),
        data=DATA_PARAMS,
        run=lambda w: {"evaluate_from": RUNS[w.run_id].evaluate_from, "skip": RUNS[w.run_id].skip_simple_layers},
        # the code this job runs: the fine-tuning stage and the runners of the family's tasks, with all they import
        code=lambda w: family_code(w.family, tuple(finetune_settings(CFG, RUNS[w.run_id], w.family)["tasks"])),
    threads: cluster.threads(CFG, "finetune")
    resources:
        **cluster.job_resources(CFG, "finetune"),
    log:
        "logs/{profile}/finetune/{run_id}/{family}.log",
    benchmark:
        "benchmarks/{profile}/finetune/{run_id}/{family}.tsv",
    shell:
        "OMP_NUM_THREADS={threads} leanlm finetune {P} --run {wildcards.run_id:q} --family {wildcards.family:q} > {log:q} 2>&1"
