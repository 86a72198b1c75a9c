"""The atomic writers leave either the old file or the whole new one, never a partial file or a temp name."""
import json
import os

import pytest

from mwb.core.atomic import atomic_open, atomic_write_json, atomic_write_jsonl, atomic_write_text


def test_writes_and_replaces(tmp_path):
    p = str(tmp_path / "sub" / "a.json")
    atomic_write_json(p, {"x": 1})
    assert json.load(open(p)) == {"x": 1}
    atomic_write_json(p, {"x": 2}, indent=None)
    assert open(p).read() == '{"x": 2}\n'
    assert os.listdir(tmp_path / "sub") == ["a.json"]


def test_jsonl_rows(tmp_path):
    p = str(tmp_path / "r.jsonl")
    assert atomic_write_jsonl(p, ({"i": i} for i in range(3))) == 3
    assert [json.loads(line) for line in open(p)] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_failure_keeps_old_file_and_removes_temp(tmp_path):
    p = str(tmp_path / "t.txt")
    atomic_write_text(p, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(p) as f:
            f.write("half of the new")
            raise RuntimeError("disk full")
    assert open(p).read() == "old"
    assert os.listdir(tmp_path) == ["t.txt"]


def test_refuses_append_mode(tmp_path):
    with pytest.raises(ValueError):
        with atomic_open(str(tmp_path / "x"), "a"):
            pass
