"""Task families are a folder (leanlm/data/families/): a family is one module there, found by its name.

A new family is its module plus its params/tasks/<family>.yaml: no list of modules to edit, nothing imported
to register it, and a family with no module fails loudly (docs/extending.md, "Add a task family").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leanlm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
THESIS_FAMILIES = ["glue", "lm", "squad", "superglue", "translation"]


def test_the_families_are_the_folders_modules_listed_without_importing_them():
    from leanlm.data.task_sources import FAMILIES

    assert FAMILIES.names() == THESIS_FAMILIES  # the *_standins modules are a family's helpers, not families
    script = ("import sys; from leanlm.data.task_sources import FAMILIES; FAMILIES.names(); 'glue' in FAMILIES; "
              "print(sorted(m for m in sys.modules if m.startswith('leanlm.data.families.')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_each_family_builds_its_own_tasks_stand_ins_and_the_hub_loaders_are_its_own():
    from leanlm.data.task_sources import FAMILIES
    from leanlm.data.tasks import tasks_in_family

    for name in THESIS_FAMILIES:
        family = FAMILIES.get(name)
        assert family.name == name and callable(family.hub), name
        for spec in tasks_in_family(name):
            assert callable(family.standin(spec.name)), spec.name


def test_a_family_with_no_module_fails_loudly():
    from leanlm.data.task_sources import FAMILIES

    with pytest.raises(ConfigError, match=r"unknown task family 'nope'.*known: glue, lm, squad"):
        FAMILIES.get("nope")
    with pytest.raises(ConfigError, match=r"task family 'glue'.*no packaged stand-in 'boolq'"):
        FAMILIES.get("glue").standin("boolq")


TOY = '''
"""A family dropped into the folder."""

from leanlm.data.families.glue_standins import BuildContext, Rows, StandInSources, _empty
from leanlm.data.task_sources import TaskFamily

def build_toy(src: StandInSources, ctx: BuildContext) -> Rows:
    return _empty()


FAMILY = TaskFamily("toy", standins={"toy_task": build_toy})
'''


def test_a_family_module_dropped_in_the_folder_is_found_with_no_other_code_edit(tmp_path):
    copy = tmp_path / "workflow"
    shutil.copytree(ROOT / "workflow" / "leanlm", copy / "leanlm", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "leanlm/data/families/toy.py").write_text(textwrap.dedent(TOY))
    script = ("from leanlm.data.task_sources import FAMILIES; print(FAMILIES.names()); "
              "print(FAMILIES.get('toy').standin('toy_task').__name__)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(copy)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [str(sorted([*THESIS_FAMILIES, "toy"])), "build_toy"]
