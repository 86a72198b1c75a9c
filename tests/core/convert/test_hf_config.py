"""The one ``config.json`` reader: real Hugging Face configs read back unchanged; a non-object file, a missing
required key or a key of the wrong type is one DataError naming the file and the key, never an
AttributeError / KeyError / TypeError, and `mwb convert` reports it in one line with exit status 1."""
import json
import os
import subprocess
import sys

import pytest

from mwb.core.convert import convert
from mwb.core.convert.hf_config import KEYS, check_config, read_config
from mwb.core.errors import DataError

GOOD = {"int": 2, "float": 0.5, "bool": True, "str": "gelu_new", "dict": None, "list": ["GPT2LMHeadModel"]}
WRONG = {"int": "2", "float": "0.5", "bool": "false", "str": 3, "dict": [1], "list": "GPT2LMHeadModel"}


def _valid(model_type: str) -> dict:
    """A config with every key the family reads, each of the right type."""
    return {"model_type": model_type, **{k.name: GOOD[k.kind] for k in KEYS[model_type]}}


def _write(tmp_path, content, name="m") -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return str(d)


@pytest.mark.parametrize("model_type", sorted(KEYS))
def test_every_key_checked(model_type):
    path = f"/x/{model_type}/config.json"
    assert check_config(_valid(model_type), path) == _valid(model_type)
    for key in KEYS[model_type]:
        bad = _valid(model_type)
        bad[key.name] = WRONG[key.kind]
        with pytest.raises(DataError, match=f"^{path}: '{key.name}' must be "):
            check_config(bad, path)
        missing = _valid(model_type)
        del missing[key.name]
        if key.required:
            with pytest.raises(DataError, match=f"^{path}: {model_type} config has no '{key.name}'"):
                check_config(missing, path)
        else:
            assert check_config(missing, path) == missing


@pytest.mark.parametrize("value, message", [
    (0, "'n_layer' must be an integer >= 1, not 0"),
    (True, "'n_layer' must be an integer >= 1, not true"),
    (2.5, "'n_layer' must be an integer >= 1, not 2.5"),
    (None, "'n_layer' must be an integer >= 1, not null"),
])
def test_sizes_are_positive_whole_numbers(value, message):
    with pytest.raises(DataError, match=message):
        check_config({**_valid("gpt2"), "n_layer": value}, "config.json")


def test_nullable_and_unread_keys_pass():
    cfg = {**_valid("gpt2"), "n_inner": None, "task_specific_params": {"x": 1}, "n_ctx": "anything"}
    assert check_config(cfg, "c") == cfg
    assert check_config({"model_type": "roberta", "hidden_size": "x"}, "c")["model_type"] == "roberta"


@pytest.mark.parametrize("content, message", [
    ([1, 2], "a config.json must be a JSON object, not a list"),
    ("gpt2", "a config.json must be a JSON object, not a string"),
    (None, "a config.json must be a JSON object, not null"),
    ({"n_layer": 2}, "model_type must be a non-empty string .* not missing"),
    ({"model_type": 3}, "model_type must be a non-empty string .* not an integer"),
    (b"{\"model_type\": ", "is not valid JSON"),
    (b"{\"model_type\": \"gpt2\xe9\"}", "is not UTF-8 text"),
])
def test_malformed_file_is_one_data_error_naming_it(tmp_path, content, message):
    d = _write(tmp_path, content)
    with pytest.raises(DataError, match=message) as e:
        read_config(d)
    assert str(e.value).startswith(os.path.join(d, "config.json")) and "\n" not in str(e.value)
    with pytest.raises(DataError, match=message):
        convert(d, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_missing_config_json(tmp_path):
    with pytest.raises(DataError, match="has no config.json"):
        read_config(str(tmp_path))


def test_wrong_type_through_convert_names_file_and_key(tmp_path):
    d = _write(tmp_path, {**_valid("gpt2"), "n_embd": "32"})
    with pytest.raises(DataError, match=r"config.json: 'n_embd' must be an integer >= 1, not \"32\""):
        convert(d, str(tmp_path / "out"))


def test_cli_list_config_is_one_line_exit_1(tmp_path):
    d = _write(tmp_path, [{"model_type": "gpt2"}])
    proc = subprocess.run([sys.executable, "-m", "mwb", "convert", d, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"mwb: error: {os.path.join(d, 'config.json')}: a config.json must be a JSON object, not a list"]


@pytest.mark.parametrize("name", ["GPT2Config", "LlamaConfig", "MistralConfig", "BertConfig", "T5Config"])
def test_real_transformers_configs_pass(tmp_path, name):
    transformers = pytest.importorskip("transformers")
    cfg = json.loads(getattr(transformers, name)().to_json_string())
    d = _write(tmp_path, cfg)
    assert read_config(d) == cfg
