"""Configs: YAML + --set with type checking; unknown keys and wrong types name the key."""
import pytest

from mwb.core.config import ConfigError, RunConfig, apply_sets, dump_yaml, load_yaml, update
from mwb.core.presets import PRESETS, apply_preset


def test_set_parses_types():
    cfg = apply_sets(RunConfig(), ["model.num_layers=2", "optim.lr=1e-3", "parallel.sp=true",
                                   "model.num_query_groups=null", "data.data=[a, b]"])
    assert cfg.model.num_layers == 2 and cfg.optim.lr == 1e-3 and cfg.parallel.sp is True
    assert cfg.model.num_query_groups is None and cfg.data.data == ["a", "b"]


@pytest.mark.parametrize("item,needle", [
    ("model.num_layer=2", "unknown config key 'model.num_layer'"),
    ("modle.num_layers=2", "unknown config section 'modle'"),
    ("model.num_layers=two", "'model.num_layers' expects an integer"),
    ("parallel.sp=3", "'parallel.sp' expects true/false"),
    ("num_layers=2", "SECTION.FIELD"),
    ("model.num_layers", "KEY=VALUE"),
])
def test_bad_set(item, needle):
    with pytest.raises(ConfigError, match=needle):
        apply_sets(RunConfig(), [item])


def test_yaml_round_trip(tmp_path):
    cfg = apply_preset(RunConfig(), "llama-tiny")
    path = tmp_path / "c.yaml"
    dump_yaml(cfg, str(path))
    assert load_yaml(RunConfig(), str(path)) == cfg
    with pytest.raises(ConfigError, match="not found"):
        load_yaml(RunConfig(), str(tmp_path / "missing.yaml"))


def test_presets_are_valid():
    for name in PRESETS:
        apply_preset(RunConfig(), name)
    with pytest.raises(ConfigError, match="unknown preset"):
        apply_preset(RunConfig(), "gpt-42")
    assert update(RunConfig(), PRESETS["gpt-1t"]).model.hidden_size == 25600
