"""Profiles are validated before anything runs; errors name the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from leanlm.config import load_config
from leanlm.errors import ConfigError
from leanlm.runs import get_run, runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(scratch_root):
    """A scratch project root with the real params/ and schemas, so tests can edit them."""
    return scratch_root


def edit(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.parametrize("profile", ["smoke", "paper", "signal", "rehearsal"])
def test_shipped_profiles_are_valid(profile):
    config = load_config(ROOT / "params" / f"{profile}.yaml")
    assert config["profile"] == profile
    ids = [r.run_id for r in runs(config)]
    variants = ["sha", "mha", "el_att", "mqa", "skv", "mhe_add", "mhe_mul"]
    assert ids[:9] == [f"ch3_encoder-{v}" for v in variants] + ["ch3_encoder-fnet", "ch3_encoder-linear"]
    assert [i for i in ids if i.startswith("ch3_decoder-")] == [f"ch3_decoder-{v}" for v in variants]
    assert [i for i in ids if i.startswith("ch3_encdec-")] == [f"ch3_encdec-{v}" for v in variants]
    # plus Table 3.14's large/medium and Table 3.15's sizes
    assert len([i for i in ids if i.startswith("ch3_")]) == 9 + 7 + 7 + 2 + 2 + 12
    # every experiment file's experiments are in every shipped profile
    from leanlm.config import load_matrix

    assert set(config["experiments"]) == set(load_matrix())


def test_sizes_and_pretrain_overrides():
    from leanlm.runs import pretrain_settings

    config = load_config(ROOT / "params" / "paper.yaml")
    big = get_run(config, "ch3_encdec_sizes-big_mhe_mul")
    assert (big.size, big.model["d_model"], big.model["n_heads"], big.model["dropout"]) == ("transformer_big", 1024, 16, 0.3)
    assert pretrain_settings(config, big)["steps"] == 300000
    assert pretrain_settings(config, get_run(config, "ch3_encdec-mha"))["steps"] == 100000
    large = get_run(config, "ch3_encoder_large-mha")
    assert (large.model["backbone"], large.model["n_layers"], large.model["n_heads"]) == ("bert", 24, 16)


def test_paper_profile_is_bert_base():
    run = get_run(load_config(ROOT / "params" / "paper.yaml"), "ch3_encoder-mhe_mul")
    assert (run.model["n_layers"], run.model["d_model"], run.model["n_heads"], run.model["head_dim"]) == (12, 768, 12, 64)
    assert run.attention == "mhe_mul"


def test_unknown_key_names_file_key_and_allowed(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d["models"]["bert"].update(n_layer=3))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "smoke.yaml" in msg and "n_layer" in msg and "n_layers" in msg


def test_wrong_type_names_the_key(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d["pretrain"]["mlm"].update(steps="many"))
    with pytest.raises(ConfigError, match=r"pretrain\.mlm\.steps"):
        load_config(path)


def test_unknown_schedule_lists_allowed_values(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d["finetune"]["glue"].update(schedule="triangular"))
    with pytest.raises(ConfigError, match="cosine_with_hard_restarts"):
        load_config(path)


def test_unknown_attention_variant_lists_registered_ones(project):
    edit(project / "params" / "experiments" / "ch3.yaml", lambda d: d["ch3_encoder"]["runs"]["mha"].update(attention="mhx"))
    with pytest.raises(ConfigError) as err:
        load_config(project / "params" / "smoke.yaml")
    assert "mhx" in str(err.value) and "mhe_mul" in str(err.value)


def test_unknown_experiment_is_named(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d.update(experiments=["ch3_encoder", "ch9_nothing"]))
    with pytest.raises(ConfigError, match="ch9_nothing"):
        load_config(path)


def test_unknown_task_is_named(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d["finetune"]["glue"].update(tasks=["sst2", "imdb"]))
    with pytest.raises(ConfigError, match="imdb"):
        load_config(path)


def test_heads_times_head_dim_must_equal_width(project):
    path = project / "params" / "smoke.yaml"
    edit(path, lambda d: d["models"]["bert"].update(head_dim=8))
    with pytest.raises(ConfigError, match="d_model"):
        load_config(path)


def test_malformed_yaml_and_missing_file(project):
    path = project / "params" / "smoke.yaml"
    path.write_text("profile: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(project / "params" / "nope.yaml")


def test_unknown_run_id(project):
    config = load_config(project / "params" / "smoke.yaml")
    with pytest.raises(ConfigError, match="ch3_encoder-mha"):
        get_run(config, "ch3_encoder-xyz")


def test_an_objective_is_a_file_of_the_objectives_folder(scratch_root):
    """The schema takes any objective name; the folder leanlm/objectives decides which exist (a new
    objective is one file): an unknown one is refused when the profile loads, naming the experiment and
    the known objectives, and so is a pretrain.<name> block of no objective."""
    from leanlm.config import load_config
    from params_files import edit_yaml

    edit_yaml(scratch_root / "params" / "experiments" / "ch3.yaml",
              lambda doc: doc["ch3_encoder"].update(objective="mlmm"))
    with pytest.raises(ConfigError) as err:
        load_config(scratch_root / "params" / "smoke.yaml")
    assert "'mlmm'" in str(err.value) and "ch3_encoder" in str(err.value) and "causal_lm" in str(err.value)
    edit_yaml(scratch_root / "params" / "experiments" / "ch3.yaml",
              lambda doc: doc["ch3_encoder"].update(objective="mlm"))
    edit_yaml(scratch_root / "params" / "smoke.yaml",
              lambda doc: doc["pretrain"].update(mlmm=doc["pretrain"]["mlm"]))
    with pytest.raises(ConfigError) as err:
        load_config(scratch_root / "params" / "smoke.yaml")
    assert "pretrain.mlmm" in str(err.value) and "leanlm/objectives" in str(err.value)
