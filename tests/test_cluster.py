"""leanlm.cluster: what a job asks SLURM for, from the profile's resources block and the environment."""

import pytest

from leanlm import cluster
from leanlm.config import load_config
from leanlm.errors import ConfigError


def test_pretraining_time_limit_follows_steps_and_is_capped():
    cfg = {"resources": {"pretrain": {"step_seconds": 0.6, "setup_minutes": 10, "max_runtime": 2880}}}
    assert cluster.pretrain_runtime(cfg, 1000) == 10 + 10
    assert cluster.pretrain_runtime(cfg, 1001) == 10 + 11  # rounded up
    assert cluster.pretrain_runtime(cfg, 1_000_000) == 2880
    assert cluster.pretrain_runtime(cfg, None) == 10  # runs without training steps (hub checkpoints)


def test_gpu_jobs_go_to_the_gpu_partition_and_cpu_jobs_to_the_default():
    cfg = {"resources": {"pretrain": {"gpus": 2, "mem_mb": 1000}, "finetune": {"gpus": 0}}}
    assert cluster.job_resources(cfg, "pretrain", environ={}) == {"gpu": 2, "mem_mb": 1000, "slurm_partition": "gpu"}
    assert cluster.job_resources(cfg, "finetune", environ={}) == {"gpu": 0, "mem_mb": 4000, "runtime": 120}
    env = {cluster.GPU_PARTITION_ENV: "a100", cluster.CPU_PARTITION_ENV: "short", cluster.ACCOUNT_ENV: "proj"}
    assert cluster.job_resources(cfg, "pretrain", environ=env)["slurm_partition"] == "a100"
    assert cluster.job_resources(cfg, "finetune", environ=env) == {
        "gpu": 0, "mem_mb": 4000, "runtime": 120, "slurm_partition": "short", "slurm_account": "proj"}


def test_profiles_size_their_jobs():
    paper, smoke = load_config("params/paper.yaml"), load_config("params/smoke.yaml")
    assert cluster.gpus(paper, "pretrain") == 1 and cluster.threads(paper, "pretrain") == 8
    assert cluster.gpus(smoke, "pretrain") == 0 and cluster.threads(smoke, "finetune") == 1


def test_unknown_kind_is_named():
    with pytest.raises(ConfigError, match="'render'"):
        cluster.job_settings({}, "render")


def test_pretraining_launches_torchrun_only_for_several_gpus_and_data_parallel_objectives():
    several = {"resources": {"pretrain": {"gpus": 4}}}
    assert cluster.pretrain_launcher(several, "mlm") == "torchrun --standalone --nproc-per-node 4 -m leanlm.cli --"
    assert cluster.pretrain_launcher(several, "causal_lm").startswith("torchrun ")
    assert cluster.pretrain_launcher(several, "translation") == "leanlm"  # trains in one process
    assert cluster.pretrain_launcher({"resources": {"pretrain": {"gpus": 1}}}, "mlm") == "leanlm"
    assert cluster.pretrain_launcher({}, "mlm") == "leanlm"
    with pytest.raises(ConfigError, match="resources.pretrain.gpus = '4; rm'"):
        cluster.pretrain_launcher({"resources": {"pretrain": {"gpus": "4; rm"}}}, "mlm")


def test_retries_cover_the_longest_chain_of_jobs():
    assert cluster.pretrain_retries([{"steps": 1000, "checkpoint_every": 300}]) == 4  # 300, 600, 900, 1000
    assert cluster.pretrain_retries([{"steps": 1000, "checkpoint_every": 300},
                                     {"steps": 50, "checkpoint_every": 10}]) == 5
    assert cluster.pretrain_retries([{"steps": 1000, "checkpoint_every": None}]) == 1  # cannot resume
    assert cluster.pretrain_retries([{"steps": None, "checkpoint_every": 10}]) == 1  # hub checkpoint: no steps


def test_paper_runs_finish_by_chaining_jobs_within_the_retries():
    """Every pretraining run of the paper profile (the 1M-step BERT and GPT-2 runs included) reaches its last
    step within the resubmissions a cluster allows: each job that hits its time limit writes at least one
    checkpoint (a checkpoint interval fits in one job at the profile's step time with a factor of 10 to
    spare), so retries + 1 jobs cover the steps whatever the real step time; at the profile's own step time
    far fewer jobs are needed."""
    from leanlm.runs import pretrain_settings, runs

    paper = load_config("params/paper.yaml")
    limits = cluster.job_settings(paper, "pretrain")
    settings = [pretrain_settings(paper, run) for run in runs(paper)]
    jobs = cluster.pretrain_retries(settings) + 1
    chained = [s for s in settings if s.get("checkpoint_every") and s.get("steps")]
    assert max(s["steps"] for s in chained) == 1_000_000
    for s in chained:
        limit = cluster.pretrain_runtime(paper, s["steps"])
        assert jobs * s["checkpoint_every"] >= s["steps"], s
        interval_minutes = s["checkpoint_every"] * limits["step_seconds"] / 60
        assert limits["setup_minutes"] + 10 * interval_minutes <= limit, s
        steps_per_job = (limit - limits["setup_minutes"]) * 60 / limits["step_seconds"]
        assert s["steps"] / steps_per_job <= jobs, s
