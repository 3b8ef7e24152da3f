"""Where each task family's rows come from, per source: one registry per source, keyed by family.

- packaged: stand-in builders register by *task* name in ``glue_standins.STANDINS`` (the GLUE
  stand-ins) or in their own family modules, which import that registry and add to it;
- hub: a loader per *family* in :data:`HUB_TASK_LOADERS`, ``loader(spec, profile, seed,
  heldout_fraction) -> (rows by split, provenance)`` (the fraction of a train split held out as test
  where the benchmark hides its test labels; families with an official test split ignore it); each family
  registers its own beside its schema mapping and its stand-ins (GLUE's in :mod:`leanlm.data.families.glue`).

:func:`import_task_modules` imports every family module so its registrations take effect; a
module that does not exist fails loudly (a missed rename must not drop a family's stand-ins).
"""

from __future__ import annotations

import importlib
from typing import Callable

from leanlm.data.tasks import TaskSpec
from leanlm.registry import Registry

HubLoader = Callable[[TaskSpec, str, int, float], tuple[dict, dict]]
HUB_TASK_LOADERS: Registry[HubLoader] = Registry("hub task family loader")

# Modules that register packaged stand-ins and hub loaders for their families.
TASK_MODULES = (
    "leanlm.data.families.glue",
    "leanlm.data.families.glue_standins",
    "leanlm.data.families.superglue",
    "leanlm.data.families.superglue_standins",
    "leanlm.data.families.squad",
    "leanlm.data.families.squad_standins",
    "leanlm.data.families.translation",
    "leanlm.data.families.lm",
)


def import_task_modules() -> None:
    for module in TASK_MODULES:
        importlib.import_module(module)
