"""report.html (leanlm report-page, issue 26 item 3) opened in a real headless Chromium.

The page is built from real outputs: chapter 4's tables and figures rendered by their renderers from
test_render_ch4's synthetic records, a claims.csv written by the claims stage from test_claims' per-example
results (one claim supported, one untestable, one not run), the logs and a benchmark where the rules put
them. The browser test skips only where Chromium, chromedriver or selenium is missing; scripts/setup.sh
installs them, and CI (.ci/run sets LEANLM_BROWSER_TEST=required) fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd
import pytest
import yaml

from leanlm.errors import DataError
from leanlm.reporting import browser
from test_claims import BASE, _write_run
from test_render_ch4 import ch4_config, render, write_records

REPO = Path(__file__).resolve().parents[1]
RENDERED = ["table_4_1", "table_4_4", "figure_4_1", "figure_4_5"]
LOGGED = "ch4_uniform-standard"  # the run whose job logs the fixture writes
HOSTILE = '<b>bold</b> & <script>document.title = "pwned"</script>'
SUBSET, SUBSET_EXPERIMENTS = "report_page", ("ch2_hashformers", "ch4_uniform")
REQUIRED = os.environ.get("LEANLM_BROWSER_TEST") == "required"
needs_browser = pytest.mark.skipif(browser.missing() is not None and not REQUIRED, reason=str(browser.missing()))


def _claims(root: Path, config: dict) -> None:
    """claims.csv by the claims stage: a clear win (supported), a claim whose precondition fails
    (untestable) and one whose runs have no results (not run)."""
    from leanlm.claims.report import main

    for run_id, rate in (("ch2_hashformers-lsh_pool", 0.6), ("ch2_hashformers-md5_pool", 0.85),
                         ("ch2_hashformers-lsh_add", 0.85), ("ch2_hashformers-md5_add", 0.55)):
        _write_run(root, config, run_id, rate, tasks=["sst2"])
    win = {**BASE, "tasks": ["sst2"], "pairs": [["ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"]],
           "thesis": [[78.9, 75.7]]}
    regime = {"a": "{experiment}-lsh_pool", "b": "{experiment}-md5_pool", "test": "better",
              "reason": "The reference must beat the weaker model here before the claim can be judged."}
    path = root / "params" / "report_claims.yaml"
    path.write_text(yaml.safe_dump({"preconditions": {"pool_in_regime": regime}, "claims": [
        {**win, "id": "ch2_report_supported"},
        {**win, "id": "ch2_report_untestable", "requires": ["pool_in_regime"]},
        {**BASE, "id": "ch2_report_not_run", "pairs": [["ch2_hashformers-lsh_proj", "ch2_hashformers-md5_proj"]]},
    ]}, sort_keys=False))
    main(config, draws=200, claims_file=path)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project root with real outputs in paper_tables/smoke/ and report.html built from them."""
    from leanlm.config import _load_matrix_cached, load_config
    from leanlm.reporting.report_page import build_report

    root = tmp_path_factory.mktemp("report_root")
    shutil.copytree(REPO / "params", root / "params")
    # A subset, as `--subset` narrows a run: the page's scale section lists the sizes of the runs it keeps only.
    smoke = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
    smoke["subsets"] = {SUBSET: list(SUBSET_EXPERIMENTS)}
    (root / "params" / "smoke.yaml").write_text(yaml.safe_dump(smoke, sort_keys=False))
    for name in ("dvc.yaml", "dvc_stages.yaml"):
        shutil.copy(REPO / name, root / name)
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)
    records = tmp_path_factory.mktemp("report_records")
    write_records(records, ch4_config())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        _load_matrix_cached.cache_clear()
        config = load_config(root / "params" / "smoke.yaml", subset=SUBSET)
        _claims(root, config)  # before the ch. 4 records join: the claims stage checks every record it reads
        shutil.copytree(records / "results", root / "results", dirs_exist_ok=True)
        for name in RENDERED:
            render(ch4_config(), name)
        tables = root / "paper_tables" / "smoke"
        pd.DataFrame({"label": [HOSTILE], "value": [1.5]}).to_csv(tables / "ch4_escape_check.csv", index=False)
        logs = root / "logs" / "smoke"
        (logs / "pretrain").mkdir(parents=True)
        (logs / "pretrain" / f"{LOGGED}.log").write_text("pretraining log\n")
        (logs / "finetune" / LOGGED).mkdir(parents=True)
        (logs / "finetune" / LOGGED / "lm_eval.log").write_text("lm_eval log\n")
        bench = root / "benchmarks" / "smoke" / "pretrain"
        bench.mkdir(parents=True)
        (bench / f"{LOGGED}.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load"
                                            "\tcpu_time\n125.5\t0:02:05\t900\t1200\t800\t850\t1\t2\t90\t110.0\n")
        report = build_report(config)
    _load_matrix_cached.cache_clear()
    return root, report


@pytest.fixture(scope="module")
def page(project):
    """The report opened in headless Chromium (quit at the module's end, whatever happens)."""
    if browser.missing() and not REQUIRED:
        pytest.skip(browser.missing())
    with browser.chromium() as driver:  # where required, a missing browser fails here, naming what is missing
        driver.get(project[1].as_uri())
        yield driver


def _ids(driver, selector: str) -> list[str]:
    return driver.execute_script(f"return Array.from(document.querySelectorAll({selector!r})).map(e => e.id)")


@needs_browser
def test_the_page_loads_without_console_errors_and_every_image_and_link_resolves(page, project):
    root, report = project
    assert page.title == "leanlm results: smoke profile"
    severe = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
    images = page.execute_script("return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.src.slice(0, 22)])")
    assert len(images) == 2 and all(done and width > 0 and src == "data:image/png;base64," for done, width, src in images)
    links = page.execute_script("return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
    files = [link for link in links if not urlparse(link).fragment]
    assert files and all(urlparse(link).scheme == "file" for link in files)  # nothing remote
    missing = [link for link in files if not Path(unquote(urlparse(link).path)).is_file()]
    assert missing == []
    for anchor in (link for link in links if urlparse(link).fragment):  # the contents point at sections
        assert page.execute_script("return document.getElementById(arguments[0]) !== null", urlparse(anchor).fragment)


@needs_browser
def test_front_page_claims_and_outputs_in_the_thesis_order(page, project):
    from leanlm.provenance import hardware

    front = page.find_element("id", "front").text
    assert "Commit\nunknown" in front  # a scratch folder is no git checkout
    assert f"Machine\n{hardware()}" in front
    assert "1 benchmarked jobs took 2 min 06 s" in front
    assert "1 supported" in front and "1 untestable" in front and "1 not run" in front
    assert "smoke profile, below the thesis's scale" in front
    # the sizes of the runs the subset keeps (ch2_hashformers: bert; ch4_uniform: qwen_500m), not every size
    scale = page.execute_script("return Array.from(document.querySelectorAll('#front ul li')).map(l => l.textContent)")
    assert [line.split(":")[0] for line in scale] == ["bert", "qwen_500m"]
    claims = {c.get_attribute("id"): c.text for c in page.find_elements("css selector", ".claim")}
    assert list(claims) == ["claim-ch2_report_supported", "claim-ch2_report_untestable", "claim-ch2_report_not_run"]
    assert "78.9 / 75.7" in claims["claim-ch2_report_supported"]
    # the verdict as claims.md/csv/tex say it: its models were pretrained once
    heading = page.find_element("css selector", "#claim-ch2_report_supported h3").text
    assert heading == "ch2_report_supported supported, one pretraining run"
    assert page.find_element("css selector", "#claim-ch2_report_untestable h3").text.endswith(" untestable")
    assert "The reference must beat the weaker model here" in claims["claim-ch2_report_untestable"]
    assert "not run" in claims["claim-ch2_report_not_run"]
    # an interval drawn for the judged claim only; its allowed region (0, inf) open on the right
    assert page.execute_script("return document.querySelectorAll('#claim-ch2_report_supported svg .open').length") == 1
    assert page.execute_script("return document.querySelectorAll('#claim-ch2_report_untestable svg').length") == 0
    assert _ids(page, ".table-item, figure") == ["table_4_1", "figure_4_1", "table_4_4", "figure_4_5", "ch4_escape_check"]


@needs_browser
def test_runs_link_to_their_results_and_logs_and_thesis_columns_sit_beside(page):
    row = page.execute_script("""
        const cells = Array.from(document.querySelectorAll('#table_4_1 td'));
        const cell = cells.find(td => td.firstChild && td.firstChild.textContent === arguments[0]);
        return Array.from(cell.querySelectorAll('a')).map(a => a.textContent);""", LOGGED)
    assert row == ["analysis.json", "pretrain.json", "pretrain log", "lm_eval log"]
    headers = page.execute_script("return Array.from(document.querySelectorAll('#table_4_1 th')).map(t => t.textContent)")
    assert headers[headers.index("avg_acc") + 1] == "avg_acc (thesis)"
    caption = page.find_element("css selector", "#figure_4_1 figcaption").text
    assert caption.startswith("Figure 4.1.")


@needs_browser
def test_text_from_outputs_is_never_markup(page):
    assert page.title == "leanlm results: smoke profile"  # the CSV's script did not run
    assert page.execute_script("return document.querySelectorAll('#ch4_escape_check b, #ch4_escape_check script').length") == 0
    assert HOSTILE in page.find_element("id", "ch4_escape_check").text


def _descendants(pid: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, set()).add(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_browser
def test_the_browser_is_quit_even_when_the_test_fails():
    with pytest.raises(RuntimeError, match="a failing check"):
        with browser.chromium() as driver:
            service = driver.service.process.pid
            started = {service} | _descendants(service)
            assert len(started) > 2  # chromedriver, Chromium and its helpers
            raise RuntimeError("a failing check")
    assert [pid for pid in started if _alive(pid)] == []


@needs_browser
def test_screenshot_of_the_front_page(project, monkeypatch, tmp_path):
    from leanlm.cli import main

    root, report = project
    monkeypatch.setenv("LEANLM_ROOT", str(root))
    out = tmp_path / "front.png"
    assert main(["report-page", "--params", str(root / "params" / "smoke.yaml"), "--screenshot", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == browser.WINDOW


def test_a_screenshot_of_a_missing_page_says_so(tmp_path):
    from leanlm.errors import LeanLMError

    with pytest.raises(LeanLMError, match="does not exist: build it first"):
        browser.screenshot(tmp_path / "report.html", tmp_path / "front.png")


def test_chromium_missing_is_named(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert browser.missing().startswith("chromium and chromedriver not found")


# --------------------------------------------------------------------------- the parts, without a browser
def test_claims_are_read_by_name_and_a_missing_column_is_named(project, tmp_path):
    from leanlm.reporting.report_page import claims

    frame = pd.read_csv(project[0] / "paper_tables" / "smoke" / "claims.csv")
    shuffled = frame[list(reversed(frame.columns))].assign(added_later="x")  # order and extras do not matter
    shuffled.to_csv(tmp_path / "claims.csv", index=False)
    read = claims(tmp_path / "claims.csv")
    assert [c["id"] for c in read] == list(dict.fromkeys(frame["claim"]))
    assert [p["svg"] is not None for c in read for p in c["parts"]] == [True, False, False]
    frame.drop(columns=["region_high"]).to_csv(tmp_path / "claims.csv", index=False)
    with pytest.raises(DataError, match=r"claims.csv has no column region_high"):
        claims(tmp_path / "claims.csv")


def test_claims_say_how_often_their_models_were_pretrained_as_claims_md_does(project, tmp_path):
    from leanlm.claims.report import verdict_text
    from leanlm.reporting.report_page import claims

    path = project[0] / "paper_tables" / "smoke" / "claims.csv"
    frame = pd.read_csv(path)
    read = {c["id"]: c for c in claims(path)}
    for claim, rows in frame.groupby("claim"):
        expected = verdict_text(rows["claim_verdict"].iloc[0], rows["claim_pretraining_runs"].iloc[0])
        assert read[claim]["verdict_text"] == expected
        assert f"## {claim}: **{expected}**" in path.with_suffix(".md").read_text()
    assert read["ch2_report_supported"]["verdict_text"] == "supported, one pretraining run"
    frame.assign(claim_pretraining_runs=3).to_csv(tmp_path / "claims.csv", index=False)
    assert claims(tmp_path / "claims.csv")[0]["verdict_text"] == "supported, 3 pretraining runs"
    frame.drop(columns=["claim_pretraining_runs"]).to_csv(tmp_path / "claims.csv", index=False)  # an older file
    assert claims(tmp_path / "claims.csv")[0]["verdict_text"] == "supported"


def test_the_scale_is_that_of_the_sizes_the_profile_runs():
    """The scale notes name the model sizes of the runs the profile, as a subset narrows it, runs."""
    from leanlm.config import load_config
    from leanlm.reporting.tables_pdf import scale_summary
    from leanlm.runs import runs

    whole = load_config(REPO / "params" / "signal.yaml")
    cpu = load_config(REPO / "params" / "signal.yaml", subset="cpu")
    sizes = [note.split(":")[0] for note in scale_summary(cpu)["notes"]]
    assert sizes == sorted({run.size for run in runs(cpu)}) and "bert" not in sizes
    assert [note.split(":")[0] for note in scale_summary(whole)["notes"]] == sorted({r.size for r in runs(whole)})
    assert len(sizes) < len(scale_summary(whole)["notes"])


def test_a_table_caption_is_the_one_its_renderer_gave(project, monkeypatch):
    """tex_caption undoes the LaTeX escaping of the table's own caption (leanlm.reporting.latex)."""
    from leanlm.reporting.aggregate import load
    from leanlm.reporting.render import TABLES
    from leanlm.reporting.report_outputs import caption_of

    monkeypatch.setenv("LEANLM_ROOT", str(project[0]))
    for name in ("table_4_1", "table_4_4"):
        given = TABLES.get(name)("smoke", ch4_config(), load("smoke")).context["caption"]
        assert caption_of("smoke", name) == " ".join(given.split())


@pytest.mark.parametrize("region, bounds, open_ends", [
    ((0.0, float("inf")), 1, 1), ((-0.5, 0.5), 2, 0), ((-float("inf"), 1.0), 1, 1),
])
def test_the_interval_is_drawn_against_the_region(region, bounds, open_ends):
    from leanlm.reporting.report_svg import MARGIN, WIDTH, interval_svg

    svg = str(interval_svg(0.2, 0.05, 0.45, region, "difference"))
    assert svg.count('class="bound"') == bounds and svg.count('class="open"') == open_ends
    at = {name: float(svg.split(f'class="{name}" {attr}="')[1].split('"')[0])
          for name, attr in (("ci", "x1"), ("no-effect", "x1"), ("estimate", "cx"), ("region", "x"))}
    assert MARGIN <= at["no-effect"] < at["ci"] < at["estimate"] < WIDTH - MARGIN  # 0 < low < estimate
    # the shading starts at the region's low bound, or at the picture's edge where that bound is -inf
    expected_start = 0.0 if region[0] == -float("inf") else at["no-effect"] if region[0] == 0 else None
    if expected_start is None:
        assert at["region"] < at["no-effect"]
    else:
        assert at["region"] == pytest.approx(expected_start, abs=0.1)


def test_the_end_of_a_run_names_the_report_the_pdf_and_the_tables(scratch_root):
    from leanlm.reporting.report_page import where_lines

    assert where_lines("smoke") == []  # nothing built: nothing named
    folder = scratch_root / "paper_tables" / "smoke"
    folder.mkdir(parents=True)
    (folder / "report.html").write_text("<!DOCTYPE html>")
    assert [line.split("  ")[0] for line in where_lines("smoke")] == [
        "leanlm: paper_tables/smoke/report.html", "leanlm: paper_tables/smoke/"]
    (folder / "tables.pdf").write_bytes(b"%PDF")
    assert "leanlm: paper_tables/smoke/tables.pdf  every table and figure" in where_lines("smoke")[1]
