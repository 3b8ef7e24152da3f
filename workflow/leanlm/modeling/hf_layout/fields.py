"""Which :class:`ModelConfig` fields a ``transformers`` class can express: the check that keeps an export
from being written wrong.

A :class:`Target` (one per leanlm backbone that has a stock ``transformers`` class) sorts every field of
ModelConfig into one of three kinds:

- ``carried``: the Hugging Face config has the field (under its own name), any value exports;
- ``unused``: the leanlm backbone never reads the field, so its value changes nothing in the model;
- ``pinned``: only some values have a Hugging Face equivalent (a :class:`Rule` says which and why).

A field in none of the three (a field added to ModelConfig after the target was written) refuses the
export at any value: nobody has yet said whether transformers can express it, and an export that loads
with a warning and random weights is worse than none (issue 26: a hash-embedding BERT exported as a stock
BERT whose embedding transformers initialised at random). :func:`check_fields` raises ConfigError naming
the field, its value and why; tests/test_export_hf.py checks every target classifies every field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig


@dataclass(frozen=True)
class Rule:
    """The values of one field a target expresses: ``allows(value, config)``; ``says`` why others do not."""

    allows: Callable[[Any, ModelConfig], bool]
    says: str


def only(*values: Any, says: str) -> Rule:
    """A rule allowing exactly ``values``."""
    return Rule(lambda value, _config: value in values, f"only {', '.join(map(repr, values))} maps; {says}")


@dataclass(frozen=True)
class Target:
    """A stock ``transformers`` model family a leanlm backbone exports to.

    ``classes``: leanlm head (checkpoint ``kind``) -> the transformers class written in
    ``architectures``; ``build(model, where)`` -> ``(config.json fields, weights by Hugging Face name)``.
    ``code``: for a class that is not transformers' own, the files of its self-contained code that go
    beside the weights (``trust_remote_code``; leanlm.export.remote); empty for a stock class.
    """

    backbone: str
    family: str  # for messages: "BERT", "GPT-2", "Qwen2"
    classes: Mapping[str, str]
    carried: frozenset[str]
    unused: frozenset[str]
    pinned: Mapping[str, Rule]
    build: Callable[..., tuple[dict[str, Any], dict[str, Any]]] = field(compare=False)
    code: tuple[str, ...] = ()

    def classified(self) -> set[str]:
        return set(self.carried) | set(self.unused) | set(self.pinned) | {"backbone"}


def check_fields(config: ModelConfig, target: Target, kind: str, where: str) -> str:
    """The transformers class a ``kind`` model of ``config`` exports to, after checking every config
    field; ConfigError naming the field, its value and the reason when the class cannot express it."""
    # The fields first: a hash-embedding BERT is refused for its embedding, whatever head it was trained with.
    cls = target.classes.get(kind, target.family)
    for spec in dataclasses.fields(ModelConfig):
        name, value = spec.name, getattr(config, spec.name)
        if name == "backbone" or name in target.carried or name in target.unused:
            continue
        rule = target.pinned.get(name)
        if rule is None:
            raise ConfigError(f"{where}: {name}={value!r}: the {target.family} export does not know whether "
                              f"transformers' {cls} can express this field, so nothing is written "
                              f"(classify it in leanlm.modeling.hf_layout)")
        if not rule.allows(value, config):
            raise ConfigError(f"{where}: {name}={value!r} cannot be exported to transformers' {cls}: "
                              f"{rule.says}; nothing was written")
    if kind not in target.classes:
        nor = " nor one in leanlm's own code" if target.code else ""  # the self-contained classes are tried last
        raise ConfigError(f"{where}: a {kind!r} model of backbone {target.backbone!r} has no stock transformers "
                          f"class{nor}; exportable {target.backbone} heads: {', '.join(sorted(target.classes))}")
    return cls


# ch. 2's Shuffle+Random model has two heads (leanlm.modeling.shuffle_random) and two classes: the official
# code's dropout + linear is stock BERT's token classifier, the default's transform is not. The checkpoint
# kind is the same for both; an export names them apart by this kind.
SHUFFLE_RANDOM_OFFICIAL = "shuffle_random:official_code"


def export_kind(model) -> str:
    """The head a model exports as: its checkpoint kind, and which of Shuffle+Random's heads it has."""
    from leanlm.modeling.checkpoint import model_kind

    kind = model_kind(model)
    if kind == "shuffle_random" and getattr(model, "head_type", "bert") == "official_code":
        return SHUFFLE_RANDOM_OFFICIAL
    return kind


def label_fields(model) -> dict[str, Any]:
    """config.json's ``id2label`` / ``label2id`` of a classifier (``LABEL_i``; a regressor's ``problem_type``)
    or of a Shuffle+Random model (its classes by name); nothing for a language model."""
    from leanlm.modeling.shuffle_random import LABELS

    if export_kind(model).startswith("shuffle_random"):
        names = list(LABELS)
    elif getattr(model, "num_labels", None) is not None:
        names = [f"LABEL_{i}" for i in range(model.num_labels)]
    else:
        return {}
    fields: dict[str, Any] = {"id2label": {str(i): name for i, name in enumerate(names)},
                              "label2id": {name: i for i, name in enumerate(names)}}
    if len(names) == 1:
        fields["problem_type"] = "regression"
    return fields
