"""What a Snakemake run prints and leaves behind besides its outputs (leanlm.run_summary, leanlm.progress):
every job's output in its own log, benchmarks of the heavy jobs and their summary, and on the terminal
Snakemake's progress plus, for a failed job, its log's path and last lines. Checked on a tiny run of the
real rules (data -> pretraining -> fine-tuning, and the hyperparameter tables), then with a job made to
fail; the pieces on their own below."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest

from leanlm import forkserver
from leanlm.errors import DataError
from leanlm.progress import progress
from leanlm.run_summary import failure_report, read_benchmarks, tail, write_summary

# The tiny project of the pipeline tests and the way they run Snakemake (its own copy for this module).
from test_pipeline import project, snakemake  # noqa: F401  (project is a fixture)

RUN = "ch3_encoder-sha"
TARGETS = (f"results/smoke/runs/{RUN}/glue.json", "hyperparameter_tables")
HEAVY = {"data", "data_corpora", "data_tokenizers", "pretrain", "finetune"}


def heavy(rule: str) -> bool:
    return rule in HEAVY or rule.startswith("data_tasks_")  # one data rule per task set (data_tasks_glue ...)


def job_blocks(output: str) -> list[dict[str, str]]:
    """The jobs Snakemake announced on the terminal: rule, and the block's fields (log, benchmark, ...)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", output)[1:]:
        rule = re.match(r"(?:local)?rule (\w+):", block).group(1)
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        jobs.append({"rule": rule, **fields})
    return jobs


@pytest.fixture(scope="module")
def terminal(project):  # noqa: F811
    return snakemake(project, *TARGETS)


@pytest.mark.slow
def test_every_job_writes_its_log_and_heavy_jobs_a_benchmark(project, terminal):  # noqa: F811
    root, _ = project
    jobs = [job for job in job_blocks(terminal) if "output" in job]  # hyperparameter_tables only collects
    assert {job["rule"] for job in jobs} == {"data", "data_tasks_glue", "pretrain", "finetune", "params_table"}
    for job in jobs:
        log = job["log"]
        assert log.startswith(f"logs/smoke/{job['rule']}"), job
        assert (root / log).stat().st_size > 0, log
        if heavy(job["rule"]):
            assert (root / job["benchmark"]).is_file(), job
            assert Path(job["benchmark"]).with_suffix("").parts[2:] == Path(log).with_suffix("").parts[2:]
        else:
            assert "benchmark" not in job, job
    assert sorted((root / "benchmarks" / "smoke").rglob("*.tsv")) == sorted(
        root / job["benchmark"] for job in jobs if heavy(job["rule"]))


@pytest.mark.slow
def test_every_rule_has_a_log_and_the_heavy_ones_a_benchmark(project):  # noqa: F811
    """Every rule: Snakemake's own linter over the paper profile (which defines all of them); the paths:
    forced dry runs of the smoke profile's whole DAG and of the paper profile's named-data rules."""
    lint = snakemake(project, "--lint", "--configfile", "params/paper.yaml", check=False)
    assert "Lints for rule pretrain " in lint and "Lints for rule data_tokenizers " in lint
    assert "No log directive defined" not in lint
    jobs = job_blocks(snakemake(project, "-n", "-F"))
    jobs += job_blocks(snakemake(project, "-n", "-F", "data/paper/tokenizers", "data/paper/corpora/slimpajama",
                                 "--configfile", "params/paper.yaml"))
    jobs = [job for job in jobs if "output" in job]  # all, analytic, hyperparameter_tables only collect
    assert {"data", "data_tasks_glue", "data_corpora", "data_tokenizers", "pretrain", "finetune", "aggregate",
            "render_table", "params_table", "analytic_table", "analytic_figure", "pdf"} <= {job["rule"] for job in jobs}
    for job in jobs:
        profile = "paper" if job["rule"] in ("data_corpora", "data_tokenizers") else "smoke"
        assert job.get("log", "").startswith(f"logs/{profile}/{job['rule']}"), job
        assert heavy(job["rule"]) == ("benchmark" in job), job


@pytest.mark.slow
def test_terminal_shows_snakemakes_progress_and_the_logs_the_jobs_output(project, terminal):  # noqa: F811
    root, _ = project
    assert "\r" not in terminal
    assert re.search(r"^(\d+) of \1 steps \(100%\) done$", terminal, re.M)
    assert "INFO leanlm" not in terminal and "step/s" not in terminal
    logs = {p.relative_to(root / "logs" / "smoke").as_posix(): p.read_text() for p in (root / "logs").rglob("*.log")}
    assert not [name for name, text in logs.items() if "\r" in text]
    # the training progress, as plain lines: the first and the last
    pretrain = logs[f"pretrain/{RUN}.log"].splitlines()
    assert [line.split(":")[1].split("[")[0].strip() for line in pretrain if line.startswith(f"pretrain {RUN}:")] == [
        "0% 0/6", "100% 6/6"]
    assert "INFO leanlm.stages.finetune" in logs[f"finetune/{RUN}/glue.log"]
    assert "data tokenizer (smoke, packaged)" in logs["data.log"] and "data tasks (smoke" in logs["data_tasks_glue.log"]


@pytest.mark.slow
def test_every_leanlm_command_forked_from_the_warm_leanlm(project, terminal):  # noqa: F811
    """Each delegated command ends its log with its own usage; the data job runs three (`leanlm data fetch`,
    `corpus`, `tokenizer`)."""
    root, _ = project
    assert "leanlm: fork server ready" in terminal
    for log in (root / "logs").rglob("*.log"):
        text = log.read_text()
        assert "not using the fork server" not in text, log
        reported = [line for line in text.splitlines() if forkserver.parse_usage(line)]
        if log.name == "data.log":
            assert len(reported) == 3 and text.splitlines()[-1] == reported[-1], text
        else:
            assert text.splitlines()[-1] == reported[0] and len(reported) == 1, log


@pytest.mark.slow
def test_summary_of_the_benchmarks(project, terminal):  # noqa: F811
    root, _ = project
    bench, logs = root / "benchmarks" / "smoke", root / "logs" / "smoke"
    assert "leanlm: benchmarks of the jobs so far: benchmarks/smoke/summary.md" in terminal
    jobs = read_benchmarks(bench, logs).set_index(["rule", "job"])
    assert sorted(jobs.index) == [("data", ""), ("data_tasks_glue", ""), ("finetune", f"{RUN}/glue"), ("pretrain", RUN)]
    assert list(jobs["forked"]) == [3, 1, 1, 1]  # data: fetch, corpus, tokenizer
    for (rule, job), row in jobs.iterrows():
        snakemake_row = pd.read_csv(bench / rule / f"{job}.tsv" if job else bench / f"{rule}.tsv", sep="\t")
        own = [forkserver.parse_usage(line) for line in (logs / (f"{rule}/{job}" if job else rule)).with_suffix(
            ".log").read_text().splitlines()]
        own = [u for u in own if u]
        assert row["wall_s"] == pytest.approx(snakemake_row["s"].iloc[0])
        assert row["cpu_s"] >= sum(u["cpu_time"] for u in own) > 0
        assert row["max_rss_mib"] >= max(u["max_rss"] for u in own) > 0
    rules = pd.read_csv(bench / "summary.csv").set_index("rule")
    assert set(rules.index) == {"data", "data_tasks_glue", "pretrain", "finetune"} and rules["jobs"].sum() == 4
    assert rules.loc["pretrain", "cpu_s"] == pytest.approx(jobs.loc[("pretrain", RUN), "cpu_s"], abs=0.01)
    text = (bench / "summary.md").read_text()
    assert "## Per rule" in text and f"| finetune | {RUN}/glue |" in text


@pytest.mark.slow
def test_failed_job_shows_its_log_tail_and_path(project, terminal):  # noqa: F811
    root, _ = project
    reported = root / "params" / "reported" / "table_3_11.csv"
    original = reported.read_text()
    reported.write_text('row,pretraining\n"an unterminated quote\n')
    try:
        out = snakemake(project, "-f", "paper_tables/smoke/table_3_11.tex", check=False)
    finally:
        reported.write_text(original)
    log = "logs/smoke/params_table/table_3_11.log"
    head = f"leanlm: rule params_table (profile=smoke, table=table_3_11) failed; last 30 lines of its log {log}:"
    assert head in out
    shown = out.split(head, 1)[1].splitlines()[1:31]
    assert shown == [f"  | {line}" for line in (root / log).read_text().splitlines()[-30:]]
    assert any("ParserError" in line for line in shown)
    assert "Error in rule params_table" in out  # Snakemake's own message stays
    assert "Traceback" not in out.split(head, 1)[0]  # the job's output is in its log, not interleaved above


# ------------------------------------------------------------------------------------------- the pieces
def test_progress_in_a_log_is_plain_lines():
    stream = io.StringIO()  # not a terminal, as a job's log file
    bar = progress(total=4, desc="pretrain x", unit="step", dynamic_ncols=True, file=stream)
    for step in range(4):
        bar.set_postfix(loss=f"{step:.2f}", refresh=False)
        bar.update(1)
    bar.close()
    for _ in progress(range(3), desc="tokenize", leave=False, file=stream):
        pass
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    assert [line.split("[")[0].strip() for line in lines] == ["pretrain x:   0% 0/4", "pretrain x: 100% 4/4",
                                                              "tokenize:   0% 0/3"]
    assert lines[1].endswith("loss=3.00]")


def test_progress_on_a_terminal_is_a_live_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    for _ in progress(range(3), desc="train", file=stream, mininterval=0):
        pass
    assert stream.getvalue().count("\r") >= 3 and "train: 100%" in stream.getvalue()


def test_usage_line_round_trip():
    usage = {"cpu_time": 12.5, "max_rss": 812.25}
    assert forkserver.parse_usage(forkserver.usage_line(usage) + "\n") == usage
    assert forkserver.parse_usage("leanlm: resources of the forked job: cpu_time=1 s") is None


def test_failure_report_of_missing_and_empty_logs(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    long = tmp_path / "long.log"
    long.write_text("".join(f"line {i}\n" for i in range(100)))
    text = failure_report([("rule a", [str(tmp_path / "gone.log")]), ("rule b", [str(empty)]),
                           ("rule c", [str(long)]), ("rule d", [])], lines=3)
    assert f"leanlm: rule a failed before writing its log {tmp_path / 'gone.log'}" in text
    assert f"rule b failed; last 0 lines of its log {empty}:\n  | (the log is empty)" in text
    assert f"rule c failed; last 3 lines of its log {long}:\n  | line 97\n  | line 98\n  | line 99" in text
    assert "rule d failed and has no log" in text
    assert tail(long, 2) == ["line 98", "line 99"]


def test_summary_rejects_a_file_that_is_no_benchmark(tmp_path):
    (tmp_path / "b" / "pretrain").mkdir(parents=True)
    (tmp_path / "b" / "pretrain" / "x.tsv").write_text("s\tmax_rss\n1.0\t2.0\n")
    with pytest.raises(DataError, match=r"pretrain/x.tsv is not a Snakemake benchmark file .*cpu_time"):
        write_summary(tmp_path / "b", tmp_path / "logs")
    assert write_summary(tmp_path / "none", tmp_path / "logs") is None
