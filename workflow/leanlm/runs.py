"""The experiment matrix resolved into runs: one :class:`Run` per pretrained model a profile trains.

:func:`runs` lays each run of the profile's ``_matrix`` over its experiment's ``defaults`` and the
profile's model size, drops the :func:`absent_runs` (hub-only runs in offline profiles) and resolves the
named pretraining data it reads; :func:`get_run` finds one by id. :func:`pretrain_settings`,
:func:`finetune_settings`, :func:`finetune_seeds` and :func:`named_pretrain_data` give the blocks a run
trains with (its variants laid over the profile's), which the pretrain/finetune/data rules pass as params;
:func:`reads_fixed_text` whether a run's model needs FixedSeqQK's fixed text, :func:`uses_codebook` whether
it hashes its tokens (:func:`check_run_tokenizer`: only with a hash embedding); :func:`public` the config
without the loader's keys.

A profile's ``pretrain_seeds`` pretrains the runs of some experiments once per seed: :func:`runs` with
``with_replicas`` adds each further replica (``<experiment>-<run>@p<seed>``, :data:`REPLICA_MARK`) after its
run, the run itself being the replica of :data:`PRETRAIN_SEED`; :func:`replica_seed`, :func:`base_run_id` and
:func:`replica_groups` read replicas back from run ids. Without ``with_replicas``, the matrix's runs alone:
what the tables show. :func:`evaluated_run_id` resolves a run's ``evaluate_from`` (a bare run name is a run
of its own experiment) for the builder and every check alike.

The config these functions take is one :func:`leanlm.config.load_config` returned: that module loads
and validates the profile and the matrix (its cross-file checks call :func:`runs`); this one does not
import it, so the two cannot form an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from leanlm.errors import ConfigError

# Run fields that are not model settings (ch. 2's runs override the experiment's objective and
# tokenizer, pick a profile pretrain variant, or need the hub: see `runs` and `absent_runs`).
RUN_ONLY_FIELDS = ("size", "evaluate_from", "skip_simple_layers", "objective", "tokenizer",
                   "pretrain_variant", "requires_hub", "hub_checkpoint", "pretrain_data")
# Objectives with no pretrain.<objective> block: `none` writes an initialised model (ProFormer is
# trained from scratch on each task), `hub` saves a pretrained hub checkpoint (CANINE-C).
BLOCKLESS_OBJECTIVES = ("none", "hub")
# Run tokenizers whose ids are rows of a hash codebook (ch. 2's hashing route, leanlm.routes.hashing): a
# setting of the run, read here so that choosing a run's input route (leanlm.plugins.route_name) needs no
# model library.
HASH_TOKENIZERS = ("hash", "hash_subword")
# Objectives that train on a task of the run's fine-tuning families (objectives/translation.py,
# translation_task: the first seq2seq task of its families): a subset may not narrow such an experiment's
# families, which could change what its pretraining trains on while its job looks the same to Snakemake.
FAMILY_READING_OBJECTIVES = ("translation",)
# The attention a run gets when it names none: the thesis's standard softmax attention.
DEFAULT_ATTENTION = {"bert": "mha", "gpt2": "mha", "transformer": "mha", "qwen": "standard"}
# The seed every model is pretrained with (data order, initialisation, masking): one pretrained model per
# configuration, as in the thesis. A profile's `pretrain_seeds` pretrains the runs of some experiments once
# more per further seed (see :func:`runs`); the replica with this seed is the run itself.
PRETRAIN_SEED = 0
# A further pretraining replica's run id: ``<experiment>-<run>@p<seed>`` (ch3_encoder-mha@p1). No experiment or
# run name holds "@" (workflow/schemas/experiments.schema.json), and "@" is plain in file paths, shells (the
# rules quote run ids anyway) and Snakemake's wildcard constraint (a regex alternation of the run ids).
REPLICA_MARK = "@p"
# Objectives with nothing to seed: a hub checkpoint is downloaded, not trained, so it has no replicas.
UNSEEDED_OBJECTIVES = ("hub",)


@dataclass(frozen=True)
class Run:
    """One pretrained model of the experiment matrix at the profile's scale."""

    experiment: str
    name: str
    backbone: str
    objective: str
    finetune: tuple[str, ...]
    model: dict[str, Any] = field(hash=False)
    size: str = ""
    tokenizer: str = "profile"
    evaluate_from: str = ""           # ch. 4 skip: evaluate this run's trained model instead
    skip_simple_layers: bool = False
    pretrain_variant: str = ""        # profile pretrain_variants.<name> laid over pretrain.<objective>
    finetune_variants: dict = field(default_factory=dict, hash=False)  # family -> finetune_variants.<name>
    hub_checkpoint: str = ""          # objective hub: the checkpoint it loads (e.g. google/canine-c)
    pretrain_corpus: str = ""         # data.corpora.<name> it pretrains on; "": the profile's corpus
    pretrain_tokenizer: str = ""      # data.tokenizers.<name> it pretrains with; "": the profile's tokenizer
    # data.corpora.<name> FixedSeqQK's fixed text is read from (only runs whose model has one);
    # "": the corpus the run pretrains on.
    fixed_text_corpus: str = ""
    # the seed it is pretrained with: PRETRAIN_SEED, or a further seed of the profile's pretrain_seeds
    pretrain_seed: int = PRETRAIN_SEED

    @property
    def run_id(self) -> str:
        """``<experiment>-<name>``; a further pretraining replica's adds ``@p<seed>`` (:data:`REPLICA_MARK`)."""
        base = f"{self.experiment}-{self.name}"
        return base if self.pretrain_seed == PRETRAIN_SEED else f"{base}{REPLICA_MARK}{self.pretrain_seed}"

    @property
    def attention(self) -> str:
        return self.model["attention"]


def _run_fields(experiment: dict, run_fields: dict) -> dict:
    return {**experiment.get("defaults", {}), **run_fields}


def _pretrain_data_fields(experiment: dict, fields: dict) -> dict:
    """The run's ``pretrain_data`` (its own, or its defaults', over the experiment's)."""
    return {**experiment.get("pretrain_data", {}), **fields.get("pretrain_data", {})}


def absent_runs(config: dict) -> dict[str, str]:
    """``{run_id: reason}`` of the matrix runs this profile cannot run, which :func:`runs` drops.

    A run with ``requires_hub: "<what it needs>"`` (CANINE-C: the hub checkpoint google/canine-c)
    runs only in profiles with ``source: hub``; elsewhere it is absent, and reporting prints the
    reason in place of its row instead of failing or pretending.
    """
    out = {}
    for experiment_name, experiment in config["_matrix"].items():
        for run_name, run_fields in experiment["runs"].items():
            need = _run_fields(experiment, run_fields).get("requires_hub")
            if need and config["source"] != "hub":
                out[f"{experiment_name}-{run_name}"] = (
                    f"{need}; profile {config['profile']} is offline (source: {config['source']})")
    return out


def pretrain_seeds(config: dict, experiment: str) -> list[int]:
    """The seeds ``experiment``'s runs are pretrained with: the profile's ``pretrain_seeds.seeds`` where
    its ``experiments`` list it (the first is :data:`PRETRAIN_SEED`: leanlm.profile_checks), else just
    :data:`PRETRAIN_SEED`."""
    block = config.get("pretrain_seeds") or {}
    return list(block["seeds"]) if experiment in block.get("experiments", ()) else [PRETRAIN_SEED]


def replica_seed(run_id: str) -> int:
    """The pretraining seed of run id ``run_id`` (:data:`PRETRAIN_SEED` for a matrix run's own id)."""
    base, mark, seed = run_id.rpartition(REPLICA_MARK)
    return int(seed) if mark and base and seed.isdigit() else PRETRAIN_SEED


def base_run_id(run_id: str) -> str:
    """The matrix run's id of a replica's run id (``ch3_encoder-mha@p1`` -> ``ch3_encoder-mha``)."""
    base, mark, seed = run_id.rpartition(REPLICA_MARK)
    return base if mark and base and seed.isdigit() else run_id


def replica_groups(config: dict) -> dict[str, list[str]]:
    """``{run_id: [its pretraining replicas' run ids]}`` of every matrix run the profile runs, the first
    seed's (the run itself) first: ``[run_id]`` where its experiment is pretrained once or its objective has
    no seed."""
    out: dict[str, list[str]] = {}
    for run in runs(config, with_replicas=True):
        out.setdefault(base_run_id(run.run_id), []).append(run.run_id)
    return out


def runs(config: dict, with_replicas: bool = False) -> list[Run]:
    """The pretrained models a profile runs, in matrix order (without its :func:`absent_runs`).

    ``with_replicas``: also each further pretraining replica of the experiments the profile's
    ``pretrain_seeds`` lists (every run but a hub checkpoint's, once per further seed, right after the run:
    the jobs Snakemake plans). Without it, the matrix's runs alone, as the tables read them."""
    out = []
    absent = config.get("absent_runs")
    if absent is None:
        absent = absent_runs(config)
    for experiment_name, experiment in config["_matrix"].items():
        backbone = experiment["backbone"]
        for run_name, run_fields in experiment["runs"].items():
            if f"{experiment_name}-{run_name}" in absent:
                continue
            fields = _run_fields(experiment, run_fields)
            size_name = fields.get("size", experiment.get("size", backbone))
            size = {k: v for k, v in config["models"][size_name].items()
                    if k not in ("backbone", "pretrain_overrides")}
            model = {"backbone": backbone, "attention": DEFAULT_ATTENTION[backbone], **size,
                     **{k: v for k, v in fields.items() if k not in RUN_ONLY_FIELDS}}
            _scale_embedding_size(model, config.get("embedding_sizes", {}))
            target = evaluated_run_id(experiment_name, fields.get("evaluate_from", ""))
            # Named data the profile defines; a profile without data.corpora/tokenizers uses its own.
            named = _pretrain_data_fields(experiment, fields)
            corpora = config.get("data", {}).get("corpora") or {}
            corpus = named.get("corpus", "") if named.get("corpus", "") in corpora else ""
            tokenizer = named.get("tokenizer", "")
            # FixedSeqQK's text corpus, only for models that read a fixed text (so no other run's identity or
            # params change), and "" where it is the pretraining corpus anyway.
            fixed_text = named.get("fixed_text", "")
            if fixed_text not in corpora or fixed_text == corpus or not reads_fixed_text(model):
                fixed_text = ""
            out.append(
                Run(
                    experiment=experiment_name,
                    name=run_name,
                    backbone=backbone,
                    objective=fields.get("objective", experiment["objective"]),
                    finetune=tuple(experiment["finetune"]),
                    model=model,
                    size=size_name,
                    tokenizer=fields.get("tokenizer", experiment.get("tokenizer", "profile")),
                    evaluate_from=target,
                    skip_simple_layers=bool(fields.get("skip_simple_layers", False)),
                    pretrain_variant=fields.get("pretrain_variant", ""),
                    finetune_variants=dict(experiment.get("finetune_variants", {})),
                    hub_checkpoint=fields.get("hub_checkpoint", ""),
                    pretrain_corpus=corpus,
                    pretrain_tokenizer=tokenizer if tokenizer in config.get("data", {}).get("tokenizers", {}) else "",
                    fixed_text_corpus=fixed_text,
                )
            )
            # a subset may keep the further replicas of some runs only (config.py: subsets' `replicas`)
            replicated = run_name in experiment.get("_replicas", [run_name])
            if with_replicas and replicated and out[-1].objective not in UNSEEDED_OBJECTIVES:
                out += [_replica(out[-1], seed) for seed in pretrain_seeds(config, experiment_name)[1:]]
    return out


def evaluated_run_id(experiment: str, target: str) -> str:
    """The run id an ``evaluate_from`` value of a run of ``experiment`` names: ``<experiment>-<run>`` as
    written, or a bare run name, which is a run of the same experiment ("" stays ""). Names hold no "-"
    (workflow/schemas/experiments.schema.json), so the first "-" always splits experiment from run. Every
    check of ``evaluate_from`` (leanlm.config's subsets and pretrain_seeds, leanlm.profile_checks) resolves
    it here, so each compares the id the run builder makes."""
    return target if not target or "-" in target else f"{experiment}-{target}"


def _replica(run: Run, seed: int) -> Run:
    """Run ``run`` pretrained with ``seed``: a run of its own, evaluating the same replica of the run it
    evaluates (ch. 4 skip; leanlm.profile_checks makes sure that run has one)."""
    target = f"{run.evaluate_from}{REPLICA_MARK}{seed}" if run.evaluate_from else ""
    return replace(run, pretrain_seed=seed, evaluate_from=target)


def uses_codebook(run) -> bool:
    """Whether run ``run`` hashes its tokens (ch. 2: its ids are hash-codebook rows)."""
    return run.tokenizer in HASH_TOKENIZERS


def check_run_tokenizer(run, config) -> None:
    """A hash embedding needs a hash tokenizer and a hash tokenizer a hash embedding (ConfigError);
    ``config`` is the run's ModelConfig. The model library is imported only when a run is checked."""
    from leanlm.modeling.hash_features import embedding_features

    hashed = bool(embedding_features(config))
    if hashed and not uses_codebook(run):
        raise ConfigError(f"run {run.run_id}: embedding {config.embedding!r} reads hash features, so its "
                          f"tokenizer must be one of {HASH_TOKENIZERS}, not {run.tokenizer!r}")
    if uses_codebook(run) and not hashed:
        raise ConfigError(f"run {run.run_id}: tokenizer {run.tokenizer!r} makes codebook rows, which "
                          f"embedding {config.embedding!r} cannot read; use a hash embedding or "
                          f"tokenizer: profile")


def reads_fixed_text(fields: Mapping) -> bool:
    """Whether a run's model fields (``Run.model``) build a model that needs a fixed text: a Qwen decoder
    whose simple layers are FixedSeqQK (what :func:`leanlm.routes.fixed_text.needs_fixed_text` tells
    of the built model). The mixer's ``qk_stream`` is read from its source, so planning imports no torch."""
    from leanlm.modeling.layouts import SIMPLE, layer_kinds
    from leanlm.modeling.variants import MIXERS

    name = fields.get("attention")
    if fields.get("backbone") != "qwen" or name not in MIXERS or MIXERS.declared(name, "qk_stream") != "text":
        return False
    try:
        return SIMPLE in layer_kinds(fields.get("layout", "uniform"), fields["n_layers"])
    except ConfigError:  # an unknown layout: config validation reports it with its own message
        return True


def _scale_embedding_size(model: dict, sizes: dict) -> None:
    """Replace a named HashFormer-Emb size (``buckets: 50K``) by the profile's ``embedding_sizes``
    value, if it has one: "Emb (50K)" means a table as large as BERT's vocabulary (Table 2.2), which
    at a small profile's scale is that profile's vocabulary."""
    options = model.get("embedding_options")
    if isinstance(options, dict) and isinstance(options.get("buckets"), str) and options["buckets"] in sizes:
        model["embedding_options"] = {**options, "buckets": sizes[options["buckets"]]}


def named_pretrain_data(config: dict, run: Run) -> dict:
    """``{"corpus": {name: settings}, "tokenizer": {name: settings}, "fixed_text": {name: settings}}`` of
    the named data run ``run`` pretrains with (only the kinds it resolves to: see :func:`runs`): what the
    pretrain rule passes as params, so changing SlimPajama's settings reruns only the runs that read it,
    and FineWeb's only the FixedSeqQK runs."""
    out = {}
    if run.pretrain_corpus:
        out["corpus"] = {run.pretrain_corpus: config["data"]["corpora"][run.pretrain_corpus]}
    if run.pretrain_tokenizer:
        out["tokenizer"] = {run.pretrain_tokenizer: config["data"]["tokenizers"][run.pretrain_tokenizer]}
    if run.fixed_text_corpus:
        out["fixed_text"] = {run.fixed_text_corpus: config["data"]["corpora"][run.fixed_text_corpus]}
    return out


def pretrain_settings(config: dict, run: Run) -> dict:
    """The profile's pretrain.<objective> block, with the run's pretrain variant laid over it (ch. 2's
    BERT-MLM: Table 2.4's steps, not Table 3.11's) and then its size overrides (BIG: 300K steps).
    Objectives without a block (``none``, ``hub``) have no settings: ``{}``."""
    if run.objective in BLOCKLESS_OBJECTIVES:
        return {}
    variant = config.get("pretrain_variants", {}).get(run.pretrain_variant, {}) if run.pretrain_variant else {}
    overrides = config["models"][run.size].get("pretrain_overrides", {})
    return {**config["pretrain"][run.objective], **variant, **overrides}


def finetune_settings(config: dict, run: Run, family: str) -> dict:
    """The profile's finetune.<family> block with the variant the run's experiment picks for that
    family laid over it (``finetune_variants: {glue: glue_ch2}`` -> Table 2.5's 5 epochs and 3
    seeds instead of Table 3.12's). A variant may set ``seeds``, which replace the profile's
    ``seeds`` for these jobs, and ``tasks``: some of the family's tasks (the data stage prepares the
    family's; the BERT-Hash card's experiment reads MNLI, MRPC and SST-2), never another."""
    variant = run.finetune_variants.get(family)
    return {**config["finetune"][family], **(config.get("finetune_variants", {})[variant] if variant else {})}


def finetune_seeds(config: dict, run: Run, family: str) -> list[int]:
    """Fine-tuning seeds of (run, family): the variant's ``seeds`` if it sets them, else the profile's."""
    return list(finetune_settings(config, run, family).get("seeds", config["seeds"]))


def get_run(config: dict, run_id: str) -> Run:
    """The run (or pretraining replica) ``run_id`` of the profile, or a ConfigError listing the known ones."""
    for run in runs(config, with_replicas=True):
        if run.run_id == run_id:
            return run
    known = ", ".join(r.run_id for r in runs(config, with_replicas=True))
    raise ConfigError(f"{config['_params_file']}: no run {run_id!r} in this profile; known: {known}")


def public(config: dict) -> dict:
    """The config without the loader's private keys (for metrics JSON and Snakemake params)."""
    return {k: v for k, v in config.items() if not k.startswith("_")}
