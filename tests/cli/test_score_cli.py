"""`mwb score` on an input with nothing to score is an error (one line, exit 1, no output file), never a
success reporting "mean toxicity 0.0000"."""
import json
import os

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.needs import needs


@pytest.mark.parametrize("content", ["", "\n  \n"], ids=["empty", "blank-lines"])
def test_empty_file_is_an_error(tmp_path, capsys, content):
    src = tmp_path / "gen.jsonl"
    src.write_text(content)
    code, out, err = run_cli(["score", str(src)], capsys)
    assert code == 1
    assert err.strip().splitlines() == [f"mwb: error: {src}: no rows to score (the file is empty); give a jsonl "
                                        f"with a 'text' per line"]
    assert "mean toxicity" not in out and not os.path.exists(tmp_path / "gen.scored.jsonl")


@needs("profanity_check")  # the default scorer
def test_only_empty_texts_is_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "gen.jsonl"
    src.write_text("".join(json.dumps({"text": ""}) + "\n" for _ in range(3)))
    code, out, err = run_cli(["score", str(src)], capsys)
    assert code == 1 and "mean toxicity" not in out
    assert err.strip().splitlines()[-1] == f"mwb: error: {src}: none of the 3 rows has a non-empty 'text' to score"
    assert not os.path.exists(tmp_path / "gen.scored.jsonl")
