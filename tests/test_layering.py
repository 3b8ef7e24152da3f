"""The house rules of the package, read from the sources (no import needed):

- no import circle between leanlm modules (imports at any depth, top level or inside functions);
- the floors (FLOORS, lowest first): a module imports only from its own floor or the floors below it, so
  the library (modeling, data, training, evaluation, the stages) knows nothing of the workflow above it
  (Snakemake's records, share, the CLI);
- the core (modeling, data, training engine, evaluation, reporting machinery, ...) never imports a
  plug-in (pretraining objectives, fine-tuning runners, chapter tables and figures) or a benchmark; a
  chapter never imports another chapter;
- every registered objective, runner, table and figure resolves, and a missing one fails loudly;
- each rule's code fingerprint covers the code its job runs and nothing of another plug-in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from leanlm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "workflow" / "leanlm"
# Plug-in folders: the folder is the registry, a file the registered name (chapters: a table's renderer).
PLUGINS = ("leanlm.objectives", "leanlm.runners", "leanlm.routes", "leanlm.reporting.ch2", "leanlm.reporting.ch3",
           "leanlm.reporting.ch4")
CHAPTERS = ("leanlm.reporting.ch2", "leanlm.reporting.ch3", "leanlm.reporting.ch4")
# The floors of the house, lowest first; a module's floor is the one naming its longest prefix. An import
# may stay on its floor or go down, never up (a function-level import counts as much as a top-level one).
FLOORS = (
    ("foundation", ("leanlm", "leanlm.errors", "leanlm.paths", "leanlm.io", "leanlm.scratch", "leanlm.registry",
                    "leanlm.schemas", "leanlm.progress", "leanlm.forkserver", "leanlm.run_summary",
                    "leanlm.process_end", "leanlm.provenance")),
    ("modeling", ("leanlm.modeling",)),
    ("matrix", ("leanlm.runs", "leanlm.record_settings")),  # the runs a profile resolves to
    ("evaluation", ("leanlm.evaluation",)),  # metrics and scoring, from predictions or a model
    ("data", ("leanlm.data",)),  # sources, task families, tokenizer, pretraining corpora
    ("lm_eval", ("leanlm.lm_eval",)),  # ch. 4's lm-eval tasks, stand-ins, mirror and adapter
    ("data stages", ("leanlm.data.plumbing.stages", "leanlm.data.fixtures", "leanlm.data.plumbing.mirror_fill")),  # DVC's commands
    ("training engine", ("leanlm.training",)),
    ("ch. 2 hashing route", ("leanlm.hashing",)),  # hashers, codebooks and how a hash run's text becomes inputs
    ("stages", ("leanlm.stages", "leanlm.plugins", "leanlm.objectives", "leanlm.runners", "leanlm.routes")),
    ("profile", ("leanlm.config", "leanlm.profile_checks")),  # a profile read and checked against the library
    # a checkpoint and its tokenizer in transformers' layout (export-hf); a hash run's inputs are computed as its
    # profile says (its route, leanlm.hashing), so the export sits above both
    ("export", ("leanlm.export",)),
    ("reporting", ("leanlm.reporting", "leanlm.claims", "leanlm.budget", "leanlm.memory", "leanlm.memory_probe")),
    ("workflow", ("leanlm.snakemake_records", "leanlm.share", "leanlm.cli", "leanlm.commands", "leanlm.job_code", "leanlm.cluster",
                  "leanlm.benchmarks")),
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """``name`` or the longest prefix of it that is a leanlm module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The leanlm modules ``module`` imports, anywhere in its source (``from pkg import sub`` counts as
    importing ``sub`` where it is a module, else ``pkg``)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
    return {o for o in map(_owner, found) if o and o != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _in(module: str, packages) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def test_the_graph_sees_the_package():
    assert len(MODULES) > 100
    assert "leanlm.training.engine" in GRAPH["leanlm.stages.pretrain"]


def test_no_import_circle():
    assert _cycles(GRAPH) == [], "import circles (each: the modules that import each other)"


def test_the_cycle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def floor_of(module: str) -> int | None:
    """The index in FLOORS of ``module``'s floor (the floor naming its longest prefix); None if none does."""
    named = [(len(p), i) for i, (_, prefixes) in enumerate(FLOORS) for p in prefixes
             if module == p or module.startswith(p + ".")]
    return max(named)[1] if named else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a floor to a higher one, as 'module (floor) imports module (floor)'."""
    return sorted(f"{m} ({FLOORS[floor_of(m)][0]}) imports {i} ({FLOORS[floor_of(i)][0]})"
                  for m, imported in graph.items() for i in imported if floor_of(i) > floor_of(m))


def test_every_module_is_on_a_floor():
    assert [m for m in MODULES if floor_of(m) is None] == [], "modules on no floor: add them to FLOORS"


def test_no_import_runs_up_the_floors():
    wrong = upward_imports(GRAPH)
    assert wrong == [], "imports from a lower floor to a higher one (FLOORS, lowest first):\n" + "\n".join(wrong)


def test_the_floor_check_finds_an_import_up_and_names_it():
    graph = {"leanlm.training.engine": {"leanlm.errors", "leanlm.snakemake_records"}, "leanlm.cli": {"leanlm.io"}}
    assert upward_imports(graph) == ["leanlm.training.engine (training engine) imports leanlm.snakemake_records "
                                     "(workflow)"]


def test_the_library_knows_nothing_of_snakemake():
    """No module below the workflow floor imports Snakemake itself or the module that reads its records."""
    workflow = len(FLOORS) - 1
    wrong = sorted(m for m, path in MODULES.items() if floor_of(m) < workflow
                   and any(isinstance(n, (ast.Import, ast.ImportFrom)) and "snakemake" in ast.unparse(n)
                           for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert wrong == []


def test_core_never_imports_a_plugin():
    wrong = sorted((m, i) for m, imported in GRAPH.items() if not _in(m, PLUGINS)
                   for i in imported if _in(i, PLUGINS))
    assert wrong == [], "core module -> plug-in imports (plug-ins are found by dotted path, leanlm.plugins)"


def test_no_library_layer_imports_a_benchmark():
    wrong = sorted((m, i) for m, imported in GRAPH.items() if not _in(m, ("leanlm.benchmarks", "leanlm.cli", "leanlm.commands"))
                   for i in imported if _in(i, ("leanlm.benchmarks",)))
    assert wrong == []


def test_a_chapter_never_imports_another():
    wrong = sorted((m, i) for m, imported in GRAPH.items() if _in(m, CHAPTERS)
                   for i in imported if _in(i, CHAPTERS) not in (None, _in(m, CHAPTERS)))
    assert wrong == []


# ------------------------------------------------------------------------------------------ registries
def test_every_objective_resolves_and_every_experiment_names_one():
    from leanlm.plugins import OBJECTIVES
    from leanlm.stages.pretrain import PretrainObjective

    assert OBJECTIVES.names() == ["causal_lm", "hub", "mlm", "none", "shuffle_random", "translation"]
    for name in OBJECTIVES.names():
        assert issubclass(OBJECTIVES.get(name), PretrainObjective), name
    for path in sorted((ROOT / "params" / "experiments").glob("*.yaml")):
        for experiment, spec in yaml.safe_load(path.read_text()).items():
            objectives = {spec.get("objective")} | {r.get("objective") for r in spec["runs"].values()}
            assert objectives - {None} <= set(OBJECTIVES.names()), (path.name, experiment)


def test_every_runner_resolves_and_every_task_has_one():
    from leanlm.data.tasks import INPUT_SHAPES, get_task, task_names
    from leanlm.plugins import TASK_RUNNERS
    from leanlm.stages.finetune import TaskRunner

    assert TASK_RUNNERS.names() == ["analysis", "lm", "lm_eval", "multiple_choice", "pair", "seq2seq", "single",
                                    "span_qa"]
    for name in TASK_RUNNERS.names():
        assert issubclass(TASK_RUNNERS.get(name), TaskRunner), name
    shapes = {get_task(name).input_shape for name in task_names()}
    assert shapes <= set(INPUT_SHAPES) <= set(TASK_RUNNERS.names()), shapes


def test_every_table_and_figure_resolves():
    from leanlm.reporting.analytic import ANALYTIC
    from leanlm.reporting.render import PARAMS_TABLES, TABLES

    items = yaml.safe_load((ROOT / "params" / "tables.yaml").read_text())
    registries = {"results": TABLES, "params": PARAMS_TABLES, "analytic": ANALYTIC}
    for name, spec in items.items():
        registry = registries[spec["kind"]]
        assert registry.target(name) == spec["renderer"], name
        assert callable(registry.get(name)), name
        module = spec["renderer"].partition(":")[0]
        assert _in(module, CHAPTERS) or module in ("leanlm.reporting.analytic", "leanlm.reporting.params_tables"), name
    assert sum(len(r.names()) for r in registries.values()) == len(items)


def test_a_missing_plugin_fails_loudly(tmp_path):
    from leanlm.plugins import OBJECTIVES
    from leanlm.registry import DottedRegistry

    with pytest.raises(ConfigError, match="unknown pretraining objective 'mlmm'; known: causal_lm, hub, mlm"):
        OBJECTIVES.get("mlmm")
    gone = DottedRegistry("table", lambda: {"table_9_9": "leanlm.reporting.ch9.tables:table_9_9",
                                            "table_2_1": "leanlm.reporting.ch2.tables:table_2_0"})
    with pytest.raises(ConfigError, match=r"table 'table_9_9': module leanlm.reporting.ch9.tables .* does not exist"):
        gone.get("table_9_9")
    with pytest.raises(ConfigError, match="has no 'table_2_0'"):
        gone.get("table_2_1")


# ------------------------------------------------------------------------------------------ fingerprints
def _closure(*modules: str) -> set[str]:
    """The files of the fingerprint, without the plug-in folders' own ``__init__`` (their docstrings, which
    every job naming the registry's package carries)."""
    from leanlm.provenance import PACKAGE_DIR as INSTALLED, import_closure

    files = {str(p.relative_to(INSTALLED)) for p in import_closure(*modules)}
    return files - {"objectives/__init__.py", "runners/__init__.py"}


def test_pretraining_fingerprint_holds_its_objective_and_no_runner_or_table():
    from leanlm.plugins import OBJECTIVES

    files = _closure("leanlm.stages.pretrain", OBJECTIVES.target("mlm"))
    assert {"stages/pretrain.py", "training/engine.py", "objectives/mlm.py", "modeling/encoder.py"} <= files
    assert not {f for f in files if f.startswith(("runners/", "reporting/"))}, files
    assert {f for f in files if f.startswith("objectives/")} == {"objectives/mlm.py"}


def test_finetuning_fingerprint_holds_its_runners_only():
    from leanlm.job_code import finetune_code
    from leanlm.plugins import TASK_RUNNERS

    files = _closure("leanlm.stages.finetune", TASK_RUNNERS.target("span_qa"))
    assert "runners/span_qa.py" in files and "evaluation/squad.py" in files  # a metric module named by string
    assert {f for f in files if f.startswith(("runners/", "objectives/", "reporting/"))} == {"runners/span_qa.py"}
    # the job's runner files, and only those: two text-pair tasks run the pair runner, a single-text task another
    assert finetune_code("glue", ["mrpc"]) == finetune_code("glue", ["mrpc", "stsb"]) != finetune_code("glue", ["sst2"])


def test_a_chapter_fingerprint_holds_no_other_chapter():
    for name, spec in yaml.safe_load((ROOT / "params" / "tables.yaml").read_text()).items():
        stage = "leanlm.reporting.analytic" if spec["kind"] == "analytic" else "leanlm.reporting.render"
        files = _closure(stage, spec["renderer"])
        chapters = {f.split("/")[1] for f in files if f.startswith("reporting/ch")}
        own = _in(spec["renderer"].partition(":")[0], CHAPTERS)
        assert chapters <= ({own.rpartition(".")[2]} if own else set()), (name, chapters)
        assert not {f for f in files if f.startswith(("runners/", "objectives/"))}, name


def test_an_edit_to_the_pdf_build_or_the_process_exit_reruns_no_table_or_training_job():
    """tables.pdf's build (reporting/tables_pdf.py) is the pdf job's alone, and how a torchrun process ends
    (process_end.py, imported by the CLI) is in no job's fingerprint."""
    from leanlm.plugins import OBJECTIVES, TASK_RUNNERS

    jobs = [_closure("leanlm.stages.pretrain", OBJECTIVES.target("mlm")),
            _closure("leanlm.stages.finetune", TASK_RUNNERS.target("span_qa"))]
    for name, spec in yaml.safe_load((ROOT / "params" / "tables.yaml").read_text()).items():
        stage = "leanlm.reporting.analytic" if spec["kind"] == "analytic" else "leanlm.reporting.render"
        jobs.append(_closure(stage, spec["renderer"]))
    assert not [files for files in jobs if {"reporting/tables_pdf.py", "process_end.py"} & files]
    assert "reporting/tables_pdf.py" in _closure("leanlm.reporting.tables_pdf")


def test_reading_a_profile_needs_no_model_library():
    # config.py reads and schema-validates; the checks that ask the model library, the task table or the
    # training stack live in leanlm.profile_checks (issue 15: cross-package checks leave config.py).
    layers = ("leanlm.modeling", "leanlm.data", "leanlm.training", "leanlm.evaluation", "leanlm.reporting")
    assert sorted(i for i in GRAPH["leanlm.config"] if _in(i, layers)) == []


def test_a_tables_families_are_families_of_its_experiments():
    """tables.yaml's ``families:`` (the families a table reads, so that a subset leaving them out skips it):
    a misspelt family would make the table skipped silently, even for the whole profile."""
    from leanlm.config import load_matrix

    matrix = load_matrix()
    items = yaml.safe_load((ROOT / "params" / "tables.yaml").read_text())
    narrowed = {name: spec for name, spec in items.items() if "families" in spec}
    assert {"table_3_9", "table_3_10"} <= set(narrowed)
    for name, spec in narrowed.items():
        assert spec["kind"] == "results", name
        for experiment in spec["experiments"]:
            assert set(spec["families"]) <= set(matrix[experiment]["finetune"]), (name, experiment)
