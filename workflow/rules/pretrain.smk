# One job per pretrained model of the experiment matrix.


rule pretrain:
    input:
        data_inputs("corpus", "tokenizer"),
    output:
        model="models/{profile}/{run_id}/model.safetensors",
        config="models/{profile}/{run_id}/config.json",
        metrics="results/{profile}/runs/{run_id}/pretrain.json",
    params:
        model=lambda w: RUNS[w.run_id].model,
        pretrain=lambda w: CFG["pretrain"][RUNS[w.run_id].objective],
        data=DATA_PARAMS,
        code=code_version("modeling", "training", "data/tokenizer"),
    threads: 1
    resources:
        gpu=1 if PROFILE == "paper" else 0,
    shell:
        "OMP_NUM_THREADS={threads} leanlm pretrain {P} --run {wildcards.run_id}"
