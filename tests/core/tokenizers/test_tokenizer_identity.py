"""``tokenizer_identity``: the cache key of data tokenized with a tokenizer follows the files' content, not
their path, and includes the side files that change the tokenizer's behaviour."""
import json
import shutil

from mwb.core.data.bundled import tokenizer_file
from mwb.core.tokenizers.loader import tokenizer_identity


def _copy(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    shutil.copy(tokenizer_file(), d / "tokenizer.json")
    return d


def test_same_files_elsewhere_same_identity_any_change_another(tmp_path):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    ident = tokenizer_identity(str(a))
    assert ident == tokenizer_identity(str(b)) == tokenizer_identity(str(a / "tokenizer.json"))
    assert ident == tokenizer_identity(tokenizer_file())
    (b / "tokenizer_config.json").write_text(json.dumps({"eos_token": "[SEP]"}))
    assert tokenizer_identity(str(b)) != ident
    c = _copy(tmp_path, "c")
    spec = json.loads((c / "tokenizer.json").read_text())
    spec["model"]["merges"] = spec["model"]["merges"][:-1]
    (c / "tokenizer.json").write_text(json.dumps(spec))
    assert tokenizer_identity(str(c)) != ident
