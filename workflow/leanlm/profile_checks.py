"""The checks of a loaded profile that reach beyond its own files: the experiment matrix resolved into runs
against the model library (attention and layout names, model configs, positions), the task table, the
tokenizers and named pretraining data a run may read, and the variants laid over the families' blocks.
:func:`leanlm.config.load_config` calls :func:`check_combinations` after schema validation, so a bad profile
stops before any job runs, with the file, the key and what to do. Kept apart from the loader so that
reading a params file needs nothing of the model library, and each check names the layer it asks.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema

from leanlm import paths
from leanlm.schemas import describe as _describe, read_params_yaml as _read_yaml, schema as _schema
from leanlm.errors import ConfigError
from leanlm.plugins import OBJECTIVES
from leanlm.runs import (BLOCKLESS_OBJECTIVES, DEFAULT_ATTENTION, PRETRAIN_SEED, UNSEEDED_OBJECTIVES, Run,
                         _pretrain_data_fields, _run_fields, base_run_id, check_run_tokenizer, evaluated_run_id,
                         finetune_settings, pretrain_settings, runs)

# Named pretraining data (an experiment's ``pretrain_data``, ch. 4's SlimPajama and Pythia BPE, and the
# corpus FixedSeqQK's fixed text comes from, FineWeb's sample-10BT, §4.3.4): the profile keys that define
# the names, and what a run may do with them (checked by `_check_pretrain_data`; the names a run resolves
# to are leanlm.runs.Run's pretrain_corpus, pretrain_tokenizer and fixed_text_corpus). Objectives that pack
# the corpus may read a named corpus; a named tokenizer travels with the model (models/<profile>/<run>/tokenizer.json),
# and only the families that read it from there may evaluate such a model: ch. 4's lm_eval and analysis
# for causal LMs (Pythia's BPE), GLUE (with its glue_ch2 variant) for ch. 2's MLM / Shuffle+Random BERTs
# (RoBERTa's BPE), whose inputs are the tokenizer's ids or, for hash_subword, its pieces hashed.
PRETRAIN_DATA_KEYS = {"corpus": "corpora", "tokenizer": "tokenizers", "fixed_text": "corpora"}
PRETRAIN_DATA_OBJECTIVES = ("mlm", "causal_lm", "shuffle_random")
NAMED_TOKENIZER_FAMILIES_BY_OBJECTIVE = {"causal_lm": ("lm_eval", "analysis"), "mlm": ("glue",),
                                         "shuffle_random": ("glue",)}
NAMED_TOKENIZER_OBJECTIVES = tuple(NAMED_TOKENIZER_FAMILIES_BY_OBJECTIVE)
NAMED_TOKENIZER_FAMILIES = ("lm_eval", "analysis", "glue")
# Run tokenizers a named tokenizer may feed: its ids (profile) or its pieces hashed (hash_subword, not
# for causal LMs, which pack with the tokenizer's own end-of-text token).
NAMED_TOKENIZER_RUN_TOKENIZERS = {"causal_lm": ("profile",), "mlm": ("profile", "hash_subword"),
                                  "shuffle_random": ("profile", "hash_subword")}


def _check_schedules(config: dict, path: Path, run: Run, model_config) -> None:
    """What the schema cannot see in a run's resolved pretraining settings (its objective's block, with its
    variant and its size's overrides laid over it): a warm-up that ends after training (the learning rate
    would never reach ``lr``) and a sequence longer than the model has positions (every batch would fail)."""
    settings = pretrain_settings(config, run)
    if not settings:
        return

    def origin(key: str) -> str:  # the profile key the resolved value comes from
        if key in config["models"][run.size].get("pretrain_overrides", {}):
            return f"models.{run.size}.pretrain_overrides.{key}"
        if run.pretrain_variant and key in config.get("pretrain_variants", {}).get(run.pretrain_variant, {}):
            return f"pretrain_variants.{run.pretrain_variant}.{key}"
        return f"pretrain.{run.objective}.{key}"

    if settings["warmup_steps"] > settings["steps"]:
        raise ConfigError(f"{path}: key {origin('warmup_steps')} = {settings['warmup_steps']} is larger than "
                          f"{origin('steps')} = {settings['steps']} (run {run.run_id}): the learning rate would "
                          f"never reach its value; make warmup_steps at most steps")
    if not _any_step_learns(settings):
        raise ConfigError(f"{path}: with {origin('steps')} = {settings['steps']} and {origin('warmup_steps')} = "
                          f"{settings['warmup_steps']} (run {run.run_id}), every step trains at learning rate 0 (the "
                          f"{settings['schedule']} schedule's warm-up starts from 0), so the 'pretrained' model would "
                          f"be its initialisation; make steps larger than warmup_steps, or warmup_steps 0")
    if settings["seq_len"] > model_config.max_tokens:
        raise ConfigError(f"{path}: key {origin('seq_len')} = {settings['seq_len']} is longer than the "
                          f"{model_config.max_tokens} positions of run {run.run_id}'s model (key "
                          f"models.{run.size}.max_position = {model_config.max_position}); lower seq_len or "
                          f"raise max_position")


def _any_step_learns(settings: dict) -> bool:
    """Whether some optimizer step of the run has a learning rate above 0. A warm-up rises from 0 at step 0
    (the Hugging Face convention the thesis used: :mod:`leanlm.training.schedules`), so ``steps: 1`` with
    any warm-up trains nothing. Only the first ``warmup_steps + 1`` steps need looking at: every schedule
    reaches its peak at the end of the warm-up."""
    from leanlm.training.schedules import lr_multiplier

    steps, warmup = settings["steps"], settings["warmup_steps"]
    return any(lr_multiplier(settings["schedule"], step, steps, warmup) > 0
               for step in range(min(steps, warmup + 1)))


def _check_finetune_lengths(config: dict, path: Path, run: Run, model_config) -> None:
    """A fine-tuning family's ``max_seq_len`` (its variant's, where the run picks one) fits the positions of
    the model it fine-tunes: a longer one passes the schema and fails in every fine-tuning job of the run."""
    for family in run.finetune:
        length = finetune_settings(config, run, family).get("max_seq_len")
        if length is None or length <= model_config.max_tokens:
            continue
        variant = run.finetune_variants.get(family)
        key = (f"finetune_variants.{variant}.max_seq_len"
               if variant and "max_seq_len" in config.get("finetune_variants", {}).get(variant, {})
               else f"finetune.{family}.max_seq_len")
        raise ConfigError(f"{path}: key {key} = {length} is longer than the {model_config.max_tokens} positions of "
                          f"run {run.run_id}'s model (key models.{run.size}.max_position = "
                          f"{model_config.max_position}); lower max_seq_len or raise max_position")


def _check_lm_windows(config: dict, path: Path, run: Run, model_config) -> None:
    """A perplexity family's window (``max_length``, default the model's context) fits the model and its
    ``stride`` fits the window (a wider stride would leave tokens between windows unscored). The runner
    (:mod:`leanlm.runners.lm`) checks the same, but only after the run's pretraining."""
    from leanlm.evaluation.protocol import THESIS_STRIDE
    from leanlm.plugins import runner_name

    for family in run.finetune:
        settings = config["finetune"].get(family) or {}  # what the runner reads
        if not any(runner_name(family, task) == "lm" for task in settings.get("tasks", ())):
            continue
        window = settings.get("max_length") or model_config.max_tokens
        stride = settings.get("stride") or THESIS_STRIDE
        if window > model_config.max_tokens:
            raise ConfigError(f"{path}: key finetune.{family}.max_length = {window} exceeds the {model_config.max_tokens} "
                              f"positions of run {run.run_id}'s model (models.{run.size}.max_position); lower it or "
                              f"leave it null")
        if stride > window:
            raise ConfigError(f"{path}: key finetune.{family}.stride = {stride} exceeds the window of {window} tokens "
                              f"(finetune.{family}.max_length, run {run.run_id}): tokens between windows would never "
                              f"be scored; make stride at most max_length")


def _check_span_windows(config: dict, path: Path, run: Run) -> None:
    """A span-QA family's window settings (doc_stride against the room a ``max_seq_len`` window leaves beside
    the question): a stride too long passes the schema and fails in every SQuAD job of the run."""
    from leanlm.data.span_windows import span_options
    from leanlm.plugins import runner_name

    for family in run.finetune:
        settings = finetune_settings(config, run, family)
        if any(runner_name(family, task) == "span_qa" for task in settings.get("tasks", ())):
            try:
                span_options(settings, family)
            except ConfigError as err:
                variant = run.finetune_variants.get(family)
                also = f" (with finetune_variants.{variant})" if variant else ""
                raise ConfigError(f"{path}: {err}{also} (run {run.run_id})") from None


def check_combinations(config: dict, path: Path) -> None:
    """Cross-file checks the schema cannot express: names that must exist elsewhere."""
    from leanlm.modeling.config import known_attention_names

    known = known_attention_names()
    data = config["data"]
    if data.get("hub_fixtures") and (config["source"] != "hub" or not data.get("hub_mirror")):
        raise ConfigError(f"{path}: key data.hub_fixtures is true, which writes the hub mirror from fixtures, so the "
                          f"profile needs source: hub (it has {config['source']!r}) and data.hub_mirror set (it has "
                          f"{data.get('hub_mirror')!r}): the directory the fixtures go to")
    for size, settings in config["models"].items():
        backbone = settings.get("backbone", size)
        if backbone not in DEFAULT_ATTENTION:
            raise ConfigError(f"{path}: key models.{size} is not a backbone name; give it backbone: one of "
                              f"{', '.join(DEFAULT_ATTENTION)}")
    for objective in config["pretrain"]:
        if objective not in OBJECTIVES or objective in BLOCKLESS_OBJECTIVES:
            raise ConfigError(f"{path}: key pretrain.{objective} names no pretraining objective with settings (a file "
                              f"of leanlm/objectives/); known: "
                              f"{', '.join(n for n in OBJECTIVES.names() if n not in BLOCKLESS_OBJECTIVES)}")
    for name, experiment in config["_matrix"].items():
        where = f"params/experiments (experiment {name!r})"
        sizes = {experiment.get("size", experiment["backbone"])}
        sizes |= {r["size"] for r in experiment["runs"].values() if "size" in r}
        for size in sorted(sizes):
            if size not in config["models"]:
                raise ConfigError(
                    f"{path}: experiment {name!r} needs model size {size!r} but key models has "
                    f"only {', '.join(config['models'])}; add models.{size}"
                )
            if config["models"][size].get("backbone", size) != experiment["backbone"]:
                raise ConfigError(f"{path}: models.{size} is not a {experiment['backbone']} backbone "
                                  f"(experiment {name!r})")
        for run_name, run_fields in experiment["runs"].items():
            fields = _run_fields(experiment, run_fields)
            objective = fields.get("objective", experiment["objective"])
            if objective not in OBJECTIVES:  # the schema takes any name: the folder is the registry
                raise ConfigError(f"{where}: run {run_name!r} pretrains with {objective!r}, which is no file of "
                                  f"leanlm/objectives/; known: {', '.join(OBJECTIVES.names())}")
            if objective in BLOCKLESS_OBJECTIVES:
                continue
            if objective not in config["pretrain"]:
                raise ConfigError(
                    f"{path}: experiment {name!r} (run {run_name!r}) pretrains with {objective!r}; "
                    f"add pretrain.{objective}"
                )
            variant = fields.get("pretrain_variant")
            if variant and variant not in config.get("pretrain_variants", {}):
                raise ConfigError(f"{path}: experiment {name!r} (run {run_name!r}) uses pretrain variant "
                                  f"{variant!r}; add pretrain_variants.{variant}")
        for family, variant in experiment.get("finetune_variants", {}).items():
            if family not in experiment["finetune"]:
                raise ConfigError(f"{where}: finetune_variants names family {family!r}, which the "
                                  f"experiment does not fine-tune on ({', '.join(experiment['finetune'])})")
            if variant not in config.get("finetune_variants", {}):
                raise ConfigError(f"{path}: experiment {name!r} fine-tunes {family} with variant "
                                  f"{variant!r}; add finetune_variants.{variant}")
        for family in experiment["finetune"]:
            if family not in config["finetune"]:
                raise ConfigError(f"{path}: experiment {name!r} fine-tunes on {family!r}; add finetune.{family}")
        for run_name, run in experiment["runs"].items():
            attention = {**experiment.get("defaults", {}), **run}.get("attention", DEFAULT_ATTENTION[experiment["backbone"]])
            if attention not in known:
                raise ConfigError(
                    f"{where}: run {run_name!r} has attention {attention!r}, which is not a registered "
                    f"variant; allowed: {', '.join(sorted(known))}"
                )
            target = run.get("evaluate_from")
            if target and evaluated_run_id(name, target) not in {
                    f"{e}-{r}" for e, x in config["_matrix"].items() for r in x["runs"]}:
                raise ConfigError(f"{where}: run {run_name!r} evaluates {target!r}, which is no run of this "
                                  f"experiment or profile")
    _check_pretrain_data(config, path)
    _check_family_tasks(config, path)  # before the variants, which may keep some of them
    _check_variants(config, path)
    for run in runs(config):
        m = run.model
        try:
            from leanlm.modeling.config import ModelConfig

            model_config = ModelConfig.from_dict({**m, "vocab_size": 1000}, where=f"run {run.run_id}")
            if run.objective != "hub":  # a hub checkpoint brings its own input format
                check_run_tokenizer(run, model_config)  # hash embeddings <-> hash tokenizers
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
        _check_schedules(config, path, run, model_config)
        if run.objective != "hub":  # a hub checkpoint brings its own positions
            _check_finetune_lengths(config, path, run, model_config)
            _check_lm_windows(config, path, run, model_config)
        _check_span_windows(config, path, run)
        if m["n_heads"] * m["head_dim"] != m["d_model"]:
            raise ConfigError(
                f"{path}: run {run.run_id} has n_heads x head_dim = {m['n_heads']} x {m['head_dim']} != "
                f"d_model = {m['d_model']} (the thesis sets d_m = n d_h, Table 3.4)"
            )
    _check_evaluated_runs(config, path)


def _check_family_tasks(config: dict, path: Path) -> None:
    """Every task a family's block names is a task of that family (params/tasks/<family>.yaml)."""
    from leanlm.data.tasks import get_task

    for family, settings in config["finetune"].items():
        for task in settings["tasks"]:
            try:
                spec = get_task(task)
            except ConfigError as exc:
                raise ConfigError(f"{path}: key finetune.{family}.tasks: {exc}") from None
            if spec.family != family:
                raise ConfigError(f"{path}: task {task!r} belongs to family {spec.family!r}, not {family!r}")
        if isinstance(settings.get("eval_every"), dict):
            unknown = sorted(set(settings["eval_every"]) - set(settings["tasks"]))
            if unknown:
                raise ConfigError(f"{path}: key finetune.{family}.eval_every names tasks not in the family: {unknown}")


def _check_evaluated_runs(config: dict, path: Path) -> None:
    """Ch. 4's evaluation-only runs: an ``evaluate_from`` run describes the model it evaluates (its
    results are labelled by its own model fields, so they must be the target's), and
    ``skip_simple_layers`` needs a model with both simple and standard layers (a hybrid). Every pretraining
    replica too: a replica evaluates the same replica of its target, which must be one the profile makes."""
    from leanlm.modeling.layouts import SIMPLE, layer_kinds

    by_id = {run.run_id: run for run in runs(config, with_replicas=True)}
    for run in by_id.values():
        if run.evaluate_from:
            target = by_id.get(run.evaluate_from)
            if target is None or target.evaluate_from:
                raise ConfigError(f"{path}: run {run.run_id} evaluates {run.evaluate_from!r}, which is no trained run "
                                  f"of this profile" + _no_replica_reason(run, by_id))
            differ = sorted(k for k in set(run.model) | set(target.model) if run.model.get(k) != target.model.get(k))
            if differ:
                raise ConfigError(f"{path}: run {run.run_id} evaluates {target.run_id}'s model but describes another: "
                                  + ", ".join(f"{k} = {run.model.get(k)!r} vs {target.model.get(k)!r}" for k in differ)
                                  + "; give it the same size, attention and layout")
            data = _pretrain_data_identity(run)
            if data != _pretrain_data_identity(target):
                raise ConfigError(f"{path}: run {run.run_id} evaluates {target.run_id}'s model but names other "
                                  f"pretraining data (corpus, tokenizer, fixed_text; '' = the profile's, for "
                                  f"fixed_text the pretraining corpus): {data} vs {_pretrain_data_identity(target)}; "
                                  f"give it the same pretrain_data")
        if run.skip_simple_layers:
            kinds = layer_kinds(run.model.get("layout", "uniform"), run.model["n_layers"]) \
                if run.backbone == "qwen" else []
            if not 0 < kinds.count(SIMPLE) < len(kinds):
                raise ConfigError(f"{path}: run {run.run_id} has skip_simple_layers but its model (backbone "
                                  f"{run.backbone}, layout {run.model.get('layout', 'uniform')!r}) is no hybrid of "
                                  f"simple and standard layers (ch. 4's Qwen decoder with e.g. layout: even)")


def _no_replica_reason(run: Run, by_id: dict[str, Run]) -> str:
    """Why replica ``run`` finds no replica of the run it evaluates, when that run itself exists ("" else)."""
    base = by_id.get(base_run_id(run.evaluate_from))
    if run.pretrain_seed == PRETRAIN_SEED or base is None:
        return ""
    why = f"objective {base.objective!r} has no seed" if base.objective in UNSEEDED_OBJECTIVES else "no replicas kept"
    return (f": {base.run_id} is pretrained once ({why}), so {base_run_id(run.run_id)}'s replicas have no model to "
            f"evaluate; evaluate a run with replicas, or leave {run.experiment} out of pretrain_seeds.experiments")


def _pretrain_data_identity(run: Run) -> tuple[str, str, str]:
    """The named data a run's model is made of: two runs with one model must agree on all of it."""
    return (run.pretrain_corpus, run.pretrain_tokenizer, run.fixed_text_corpus)


def _experiment_file(name: str) -> str:
    """The params/experiments/*.yaml file defining experiment ``name`` (for error messages)."""
    for candidate in sorted((paths.params_dir() / "experiments").glob("*.yaml")):
        doc = _read_yaml(candidate) or {}
        if name in doc:
            return str(candidate.relative_to(paths.project_root()))
    return "params/experiments"


def _check_pretrain_data(config: dict, path: Path) -> None:
    """An experiment's ``pretrain_data`` names data the profile defines (when the profile defines any of
    that kind), and is used where its data can be honoured: see PRETRAIN_DATA_OBJECTIVES and
    NAMED_TOKENIZER_FAMILIES."""
    for name, experiment in config["_matrix"].items():
        for run_name, run_fields in experiment["runs"].items():
            fields = _run_fields(experiment, run_fields)
            named = _pretrain_data_fields(experiment, fields)
            if not named:
                continue

            def where(name=name, run_name=run_name) -> str:  # only on error: it reads params/experiments/
                return f"{_experiment_file(name)} (experiment {name!r}, run {run_name!r})"

            for kind, value in named.items():
                profile_key = PRETRAIN_DATA_KEYS.get(kind)
                if profile_key is None:
                    raise ConfigError(f"{where()}: key pretrain_data.{kind} is not allowed; allowed keys: "
                                      f"{', '.join(PRETRAIN_DATA_KEYS)}")
                defined = config["data"].get(profile_key)
                if defined is not None and value not in defined:
                    raise ConfigError(f"{where()}: key pretrain_data.{kind} = {value!r} is not defined by {path} "
                                      f"(key data.{profile_key}); allowed: {', '.join(map(repr, defined)) or 'none'}")
            objective = fields.get("objective", experiment["objective"])
            if objective not in PRETRAIN_DATA_OBJECTIVES:
                raise ConfigError(f"{where()}: pretrain_data needs an objective that pretrains on the packed corpus "
                                  f"({', '.join(PRETRAIN_DATA_OBJECTIVES)}), not {objective!r}")
            tokenizer = fields.get("tokenizer", experiment.get("tokenizer", "profile"))
            allowed = NAMED_TOKENIZER_RUN_TOKENIZERS.get(objective, ()) if "tokenizer" in named else ("profile",)
            if tokenizer not in allowed:
                raise ConfigError(f"{where()}: pretrain_data{'.tokenizer' if 'tokenizer' in named else ''} with "
                                  f"objective {objective!r} needs tokenizer: {' or '.join(allowed or ('profile',))} "
                                  f"(the run's inputs come from the named data), not {tokenizer!r}")
            if "tokenizer" in named:
                families = NAMED_TOKENIZER_FAMILIES_BY_OBJECTIVE.get(objective)
                if families is None:
                    raise ConfigError(f"{where()}: pretrain_data.tokenizer needs objective "
                                      f"{' or '.join(NAMED_TOKENIZER_OBJECTIVES)}, not {objective!r}")
                other = [f for f in experiment["finetune"] if f not in families]
                if other:
                    raise ConfigError(f"{where()}: pretrain_data.tokenizer is read back from the model directory, for "
                                      f"objective {objective!r}, by the {' and '.join(families)} famil"
                                      f"{'ies' if len(families) > 1 else 'y'} only; families {', '.join(other)} would "
                                      f"encode with the profile's tokenizer")


def _check_variant_tasks(config: dict, path: Path, name: str, tasks) -> None:
    """A variant's ``tasks`` keep some of its family's tasks (the card's MNLI, MRPC and SST-2 of GLUE): the
    data stage prepares the family's tasks from the family's block, so a variant may read fewer, never others."""
    families = [f for e in config["_matrix"].values() for f, v in e.get("finetune_variants", {}).items() if v == name]
    if not (isinstance(tasks, list) and tasks and all(isinstance(t, str) for t in tasks)
            and len(set(tasks)) == len(tasks)):
        raise ConfigError(f"{path}: key finetune_variants.{name}.tasks = {tasks!r} must be a non-empty list of "
                          f"distinct task names of its family")
    for family in families:
        outside = [t for t in tasks if t not in config["finetune"].get(family, {}).get("tasks", [])]
        if outside:
            raise ConfigError(f"{path}: key finetune_variants.{name}.tasks names {', '.join(outside)}, which is "
                              f"not in finetune.{family}.tasks: a variant keeps some of its family's tasks "
                              f"(the data stage prepares those), it cannot add one")


def _check_variants(config: dict, path: Path) -> None:
    """Validate every block a run trains with after its variant is laid over it, against the same
    schema definition as the profile's own blocks (so a variant cannot set what a block cannot)."""
    defs = _schema("params.schema.json")["$defs"]
    for name in config.get("finetune_variants", {}):
        variant = config["finetune_variants"][name]
        if "tasks" in variant:
            _check_variant_tasks(config, path, name, variant["tasks"])
        seeds = variant.get("seeds", [0])
        if not (isinstance(seeds, list) and seeds and all(isinstance(x, int) and x >= 0 for x in seeds)):
            raise ConfigError(f"{path}: key finetune_variants.{name}.seeds = {seeds!r} must be a non-empty "
                              f"list of non-negative integers")
    for run in runs(config):
        blocks = []
        if run.pretrain_variant:
            blocks.append((pretrain_settings(config, run), "pretrain", f"pretrain_variants.{run.pretrain_variant}"))
        for family, variant in run.finetune_variants.items():
            merged = {k: v for k, v in finetune_settings(config, run, family).items() if k != "seeds"}
            blocks.append((merged, "finetune", f"finetune_variants.{variant}"))
        for block, kind, where in blocks:
            errors = list(jsonschema.Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{kind}"}).iter_errors(block))
            if errors:
                raise ConfigError(f"{path}: {where} (run {run.run_id}): {_describe(jsonschema.exceptions.best_match(errors))}")
