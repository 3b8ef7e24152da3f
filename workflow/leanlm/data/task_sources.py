"""Where each task family's rows come from: the folder :mod:`leanlm.data.families`, a module per family.

Family ``<family>`` (``params/tasks/<family>.yaml``) is the module ``leanlm.data.families.<family>``, which
holds ``FAMILY``, a :class:`TaskFamily`: its packaged stand-ins (a builder per task, from the packaged raw
text) and its hub loader. :data:`FAMILIES` finds a family by its name, as the plug-in folders are found
(:class:`leanlm.registry.FolderRegistry`): listing the families imports none, a data job imports only the
families it builds, and a family with no module fails loudly. A module ``<family>_standins.py`` holds a
family's stand-in builders beside its hub loader (a helper of the family, not a family). A new family is
one module here plus its params/tasks/<family>.yaml (docs/extending.md, "Add a task family").

The lm-eval families (params/tasks/lm_eval.yaml) have no module: lm-eval reads their tasks
(:mod:`leanlm.lm_eval.stage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from leanlm.data.tasks import TaskSpec
from leanlm.errors import ConfigError, DataError
from leanlm.registry import FolderRegistry, resolve

# (spec, profile, seed, heldout_fraction) -> (rows by split, provenance). heldout_fraction: the share of a
# train split held out as test where the benchmark hides its test labels (families with an official test
# split ignore it).
HubLoader = Callable[[TaskSpec, str, int, float], tuple[dict, dict]]
# (the packaged raw files, the task's build context) -> rows by split (leanlm.data.families.glue_standins).
PackagedBuilder = Callable[[Any, Any], dict]


@dataclass(frozen=True)
class TaskFamily:
    """How one family's task sets are built, from each source.

    ``standins``: task name -> its packaged stand-in builder (a mapping, or a :class:`leanlm.registry.Registry`),
    or the dotted path ``"leanlm.data.families.<module>:<attr>"`` of one, resolved when a stand-in is asked
    for (where the stand-ins module imports the family's module, as SuperGLUE's does). ``hub``: the loader of
    a task from the hub (None: the family is packaged only).
    """

    name: str
    standins: Mapping[str, PackagedBuilder] | Any | str
    hub: HubLoader | None = None

    def standin(self, task: str) -> PackagedBuilder:
        builders = self.standins
        if isinstance(builders, str):
            builders = resolve(builders, f"task family {self.name!r}: its stand-ins", "leanlm.data.families")
        if task not in builders:
            known = sorted(builders.names() if hasattr(builders, "names") else builders)
            raise ConfigError(f"task family {self.name!r} has no packaged stand-in {task!r}; it builds "
                              f"{', '.join(known) or 'none'} (leanlm/data/families/{self.name}.py)")
        return builders.get(task)

    def load_hub(self, spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
        if self.hub is None:
            raise ConfigError(f"task {spec.name!r}: task family {self.name!r} has no hub loader "
                              f"(leanlm/data/families/{self.name}.py); build it with source: packaged")
        return self.hub(spec, profile, seed, heldout_fraction)


FAMILIES: FolderRegistry[TaskFamily] = FolderRegistry("task family", "leanlm.data.families", "FAMILY",
                                                      helpers="*_standins")


def build_standin(task: str, sources, ctx) -> dict:
    """The packaged stand-in rows of ``task`` (its family's builder); every split must have rows."""
    from leanlm.data.tasks import get_task

    rows = FAMILIES.get(get_task(task).family).standin(task)(sources, ctx)
    for split, split_rows in rows.items():
        if not split_rows:
            raise DataError(f"the packaged stand-in of {task!r} has no {split} rows; the raw files under "
                            f"{sources.raw_dir} hold too little text (rerun the fetch stage)")
    return rows
