# One job per trained model of the experiment matrix (runs that only evaluate another run's model,
# like ch. 4's skip, have none).


rule pretrain:
    input:
        data_inputs("corpus", "tokenizer"),
        # the translation objective trains on a task's train split: its family's task sets (data.smk)
        run_task_inputs,
        # ch. 4: the named corpus and tokenizer (SlimPajama, Pythia BPE) where the profile defines them, and
        # for FixedSeqQK runs the corpus of their fixed text (FineWeb).
        run_data_inputs,
    output:
        model="models/{profile}/{run_id}/model.safetensors",
        config="models/{profile}/{run_id}/config.json",
        metrics="results/{profile}/runs/{run_id}/pretrain.json",
    params:
        model=lambda w: RUNS[w.run_id].model,
        pretrain=lambda w: pretrain_settings(CFG, RUNS[w.run_id]),
        # ch. 2 runs choose their objective, tokenizer (words, pieces, hash codebook) and hub checkpoint.
        inputs=lambda w: {k: getattr(RUNS[w.run_id], k) for k in ("objective", "tokenizer", "hub_checkpoint")},
        data=run_data_params,
        # the code this job runs: the pretraining stage and the run's objective, with all they import
        code=lambda w: pretrain_code(RUNS[w.run_id]),
        # leanlm, or torchrun with one process per GPU where resources.pretrain.gpus > 1 (leanlm.cluster)
        launch=lambda w: cluster.pretrain_launcher(CFG, RUNS[w.run_id].objective),
    # GPUs, threads, memory per the profile's resources.pretrain; the time limit follows the run's steps
    # (leanlm.cluster). A run longer than one job's limit goes on from its checkpoint in the next one.
    threads: cluster.threads(CFG, "pretrain")
    resources:
        **cluster.job_resources(CFG, "pretrain"),
        runtime=lambda w: cluster.pretrain_runtime(CFG, pretrain_settings(CFG, RUNS[w.run_id]).get("steps")),
    log:
        "logs/{profile}/pretrain/{run_id}.log",
    benchmark:
        "benchmarks/{profile}/pretrain/{run_id}.tsv",
    shell:
        # --keep-checkpoint: the final training state stays until Snakemake has recorded the outputs (the
        # Snakefile's hooks delete it then), so a job killed after training never starts again from step 0.
        "OMP_NUM_THREADS={threads} {params.launch} pretrain {P} --run {wildcards.run_id:q} --keep-checkpoint "
        "> {log:q} 2>&1"


# Ch. 2's pretraining speed (Table 2.3's PT columns and the speed claims): every pretrained MLM and S+R run
# of ch2_hashformers built at the profile's size and timed in interleaved rounds at one batch, per sample
# (leanlm.benchmarks.objective_speed). Its own job, not the training wall clock: the runs train at
# different batches, on machines shared with other jobs (docs/benchmarks.md).
SPEED_RUNS = speed_runs(CFG)


def speed_outputs():
    return [f"results/{PROFILE}/speed/ch2_hashformers.json"] if SPEED_RUNS else []


if SPEED_RUNS:

    rule pretraining_speed:
        output:
            speed_outputs(),
        params:
            speed=speed_settings(CFG),
            # what each timed model is: its fields and its pretraining settings (batch building, AdamW)
            runs={r: {"model": RUNS[r].model, "pretrain": pretrain_settings(CFG, RUNS[r])} for r in SPEED_RUNS},
            code=code_of("leanlm.benchmarks.objective_speed"),
        threads: cluster.threads(CFG, "pretrain")
        resources:
            **cluster.job_resources(CFG, "pretrain"),
            runtime=cluster.pretrain_runtime(CFG, len(SPEED_RUNS) * speed_steps(CFG)),
        log:
            f"logs/{PROFILE}/pretraining_speed.log",
        benchmark:
            f"benchmarks/{PROFILE}/pretraining_speed.tsv",
        shell:
            "OMP_NUM_THREADS={threads} leanlm bench --speed {P} > {log:q} 2>&1"
