"""The model library's variant registries and the one contract their variants share.

Three folders of variants, each chosen by the name the thesis uses (:class:`leanlm.registry.VariantRegistry`:
a module declares ``@REGISTRY.register("name")`` on a class, read from the source; nothing is imported to
list them, and a job imports only the variants its model builds):

- :data:`ATTENTION`: ch. 3's attention sublayers, ``modeling/attention/<module>.py`` (BERT, GPT-2 and the
  encoder-decoder build every block's attention from ``config.attention``);
- :data:`MIXERS`: ch. 4's token mixers, ``modeling/mixers/<module>.py`` (the Qwen decoder: ``config.attention``
  in its simple layers, ``standard`` in the others, by ``config.layout``);
- :data:`EMBEDDINGS`: word embeddings, ``modeling/<kind>_embeddings.py`` (the BERT encoder's
  ``config.embedding``, with ``config.embedding_options``).

The contract (:class:`Variant`): a variant receives the model config and takes what it declares. ``options``
names the :data:`VARIANT_OPTIONS` fields of ModelConfig it reads (GQA's ``n_kv_heads``); any of them set for
a model none of whose variants declares it is an error naming the variant and the key
(:func:`check_variants`, called by ``ModelConfig.validate``: at ``leanlm validate`` and when a profile is
loaded, before any job). ``check_config`` refuses settings a variant cannot build with. :func:`model_variants`
says which variants a config builds, which is also what a job's code fingerprint holds
(:func:`variant_modules`, :mod:`leanlm.job_code`).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping

from pathlib import Path

from leanlm.errors import ConfigError
from leanlm.fixed_files import once
from leanlm.memo import disk_memo
from leanlm.registry import VariantRegistry

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # leanlm/

ATTENTION = VariantRegistry("attention", "leanlm.modeling.attention", "ATTENTION")
MIXERS = VariantRegistry("token mixer (ch. 4 attention variant)", "leanlm.modeling.mixers", "MIXERS")
EMBEDDINGS = VariantRegistry("word embedding", "leanlm.modeling", "EMBEDDINGS", pattern="*_embeddings.py")

# ModelConfig fields that only some variants read, with when a config sets one (rather than leaving the
# backbone's plain form). A variant that reads one lists it in ``options``; a new knob is a field of ModelConfig
# and an entry here. n_kv_heads equal to n_heads is plain MHA (Qwen's Table 4.10 sizes state it so).
VARIANT_OPTIONS: dict[str, Callable[[Any], bool]] = {
    "n_kv_heads": lambda config: config.n_kv_heads not in (0, config.n_heads),
}
# The config key that names each registry's variant, and what its variants are called in errors.
_KEY = {"ATTENTION": ("attention", "ch. 3 attention variant"), "MIXERS": ("attention", "ch. 4 token mixer"),
        "EMBEDDINGS": ("embedding", "word embedding")}

# Ch. 3's MHA (ModelConfig's default attention) names ch. 4's Standard in a Qwen model.
_QWEN_DEFAULT = {"mha": "standard"}


class Variant:
    """What every registered variant shares (a mixin: no parameters, no state)."""

    variant_name: ClassVar[str] = ""  # stamped by ``@REGISTRY.register(name)``
    options: ClassVar[tuple[str, ...]] = ()  # the VARIANT_OPTIONS it reads

    @classmethod
    def check_config(cls, config, where: str = "model config") -> None:
        """Raise ConfigError for a config this variant cannot be built with; nothing to check by default."""


def model_variants(model: Mapping[str, Any] | Any) -> list[tuple[VariantRegistry, str]]:
    """``(registry, name)`` of each variant a model config (a ModelConfig or its mapping) builds."""
    get = model.get if isinstance(model, Mapping) else (lambda key, default=None: getattr(model, key, default))
    backbone, attention = get("backbone", "bert"), get("attention", "mha")
    if backbone == "qwen":
        from leanlm.modeling.layouts import SIMPLE, STANDARD, layer_kinds

        kinds = set(layer_kinds(get("layout", "uniform"), get("n_layers")))
        found = [(MIXERS, _QWEN_DEFAULT.get(attention, attention))] if SIMPLE in kinds else []
        return found + ([(MIXERS, "standard")] if STANDARD in kinds and (MIXERS, "standard") not in found else [])
    found = [(ATTENTION, attention)]
    if backbone == "bert":  # the other backbones build their own token table
        found.append((EMBEDDINGS, get("embedding", "standard")))
    return found


def variant_modules(model: Mapping[str, Any] | Any) -> list[str]:
    """The dotted modules of the variants a model builds: the model code its jobs run beyond the backbones."""
    return sorted({registry.module_of(name) for registry, name in model_variants(model)})


def check_variants(config, where: str = "model config") -> None:
    """Each variant ``config`` builds must exist and accept the config; a VARIANT_OPTIONS field set where no
    variant of the model declares it is an error naming the variants and the key.

    A config that passed is remembered on disk (leanlm.memo) with the model library's sources it passed
    against: checking imports the variants, and with them torch (about a second of every `snakemake`
    call's planning); an edit to any model file, or another config, checks again. Refusals are never
    remembered."""
    key = _passed_key(config)
    memo = disk_memo(_PACKAGE_DIR, "leanlm-variant-checks.json")
    if memo.entries.get(key):
        return
    _check_variants(config, where)
    memo.entries[key] = True
    memo.changed()


def _passed_key(config) -> str:
    """A hash of ``config``'s fields and of every model-library source (and the registry that reads their
    declarations), by path, time and size."""
    import dataclasses
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(dataclasses.asdict(config), sort_keys=True, default=repr).encode())
    digest.update(once(("model sources",), _sources_stamp).encode())  # a profile has ~150 model configs
    return digest.hexdigest()


def _sources_stamp() -> str:
    """Every model-library source (and the registry that reads their declarations), by path, time and size."""
    stamp = []
    for path in sorted((_PACKAGE_DIR / "modeling").rglob("*.py")) + [_PACKAGE_DIR / "registry.py"]:
        stat = path.stat()
        stamp.append(f"{path.relative_to(_PACKAGE_DIR)}:{stat.st_mtime_ns}:{stat.st_size};")
    return "".join(stamp)


def _check_variants(config, where: str) -> None:
    built = []
    for registry, name in model_variants(config):
        if name not in registry:
            key, label = _KEY[registry.decorator]
            raise ConfigError(f"{where}: {key}={name!r} is not a {label}, which the {config.backbone} backbone "
                              f"builds; known: {', '.join(registry.names())}")
        built.append((registry, name, registry.get(name)))
    declared = {option for _, _, cls in built for option in cls.options}
    for key, is_set in VARIANT_OPTIONS.items():
        value = getattr(config, key)
        if is_set(config) and key not in declared:
            names = " / ".join(f"{registry.kind} {name!r} ({registry.module_of(name)})"
                               for registry, name, _ in built if registry is not EMBEDDINGS)
            raise ConfigError(f"{where}: {names} takes no option {key} (set to {value!r}); remove {key}, or "
                              f"pick a variant that declares it in its options")
    for _, _, cls in built:
        cls.check_config(config, where)
