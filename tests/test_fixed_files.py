"""``leanlm.fixed_files``: within one pass (a profile's load) each file-system answer is computed once;
between passes, and outside any, every call reads the files afresh, so an edit is seen by the next pass."""

import threading

import pytest

from leanlm.fixed_files import files_fixed, once


def counter():
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    return calls, compute


def test_outside_a_scope_every_call_computes():
    calls, compute = counter()
    assert [once("k", compute) for _ in range(3)] == [1, 2, 3]


def test_within_a_scope_each_key_is_computed_once_and_nested_scopes_share_it():
    calls, compute = counter()
    with files_fixed():
        assert once("k", compute) == once("k", compute) == 1
        with files_fixed():
            assert once("k", compute) == 1
        assert once("other", compute) == 2 and once("k", compute) == 1  # the inner scope's end kept the outer's
    assert once("k", compute) == 3 and len(calls) == 3  # the scope's answers are gone with it


def test_an_error_is_not_remembered():
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) == 1:
            raise OSError("not there yet")
        return "read"

    with files_fixed():
        with pytest.raises(OSError):
            once("k", flaky)
        assert once("k", flaky) == "read" and len(tries) == 2


def test_a_thread_that_opened_no_scope_computes_afresh():
    calls, compute = counter()
    seen = []
    with files_fixed():
        once("k", compute)
        thread = threading.Thread(target=lambda: seen.append(once("k", compute)))
        thread.start()
        thread.join()
    assert seen == [2]


def test_a_task_file_added_between_two_loads_is_seen_by_the_second(scratch_root):
    """A profile's load is one pass: the task files it read are not kept for the next load, nor for
    ``get_task`` outside one; within a pass the first reading stands."""
    from leanlm.config import load_config
    from leanlm.data.tasks import task_names
    from leanlm.errors import ConfigError

    smoke = scratch_root / "params" / "smoke.yaml"
    load_config(smoke)
    tasks = scratch_root / "params" / "tasks"
    glue = (tasks / "glue.yaml").read_text()
    with files_fixed():
        before = task_names()
        (tasks / "glue_again.yaml").write_text(glue.replace("\nglue:", "\nglue_again:", 1))
        assert task_names() == before  # the pass's first reading
    with pytest.raises(ConfigError, match="is defined twice"):  # every GLUE task, now in two files
        task_names()
    with pytest.raises(ConfigError, match="is defined twice"):
        load_config(smoke)


def test_the_project_root_from_leanlm_root_does_not_need_the_working_directory(tmp_path, monkeypatch):
    """With LEANLM_ROOT set, the root is that folder even where the working directory has been deleted (a job
    started in a scratch folder that is gone): finding the root never asks for the working directory then."""
    from leanlm import paths

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    assert paths.project_root() == tmp_path.resolve()
    with files_fixed():
        assert paths.project_root() == tmp_path.resolve()
