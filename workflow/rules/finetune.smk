# One job per (pretrained model, task family); the seeds run inside the job.
# finetune_settings: the family's block with the experiment's variant laid over it (ch. 2: glue_ch2).


from leanlm.runs import finetune_seeds, finetune_settings

# A fine-tuning job's code is its family's stage, its tasks' runners and its run's model variants
# (leanlm.job_code); leanlm.provenance hashes each distinct closure once per process, so the ~190 jobs of the
# paper profile cost a few dozen hashes.

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
        code=lambda w: finetune_code(w.family, finetune_settings(CFG, RUNS[w.run_id], w.family)["tasks"], RUNS[w.run_id]),
    threads: cluster.threads(CFG, "finetune")
    resources:
        **cluster.job_resources(CFG, "finetune"),
    log:
        "logs/{profile}/finetune/{run_id}/{family}.log",
    benchmark:
        "benchmarks/{profile}/finetune/{run_id}/{family}.tsv",
    shell:
        "OMP_NUM_THREADS={threads} leanlm finetune {P} --run {wildcards.run_id:q} --family {wildcards.family:q} > {log:q} 2>&1"
