"""The shared readers of mwb/tasks/api/formats: a split's file, SQuAD JSON, prompt/target records."""
import json

import pytest

from mwb.core.errors import DataError
from mwb.tasks.api.formats.prompt_target import read_pairs, to_pair
from mwb.tasks.api.formats.splits import find_file, split_file, with_extensions
from mwb.tasks.api.formats.squad_json import read_squad_json


def test_split_file_searches_names_in_order_then_subdirectories(tmp_path):
    (tmp_path / "MNLI").mkdir()
    (tmp_path / "MNLI" / "dev_matched.tsv").write_text("x")
    (tmp_path / "dev.json").write_text("{}")
    (tmp_path / "dev.csv").write_text("a,b")
    names = with_extensions("dev", (".jsonl", ".json", ".csv"))
    assert names == ("dev.jsonl", "dev.json", "dev.csv")
    assert split_file(str(tmp_path), "dev", names, "t") == str(tmp_path / "dev.json")  # first existing name
    assert split_file(str(tmp_path), "dev", ("dev_matched.tsv",), "GLUE mnli",
                      subdirs=("", "MNLI")) == str(tmp_path / "MNLI" / "dev_matched.tsv")
    one = str(tmp_path / "dev.csv")
    assert split_file(one, "train", names, "t") == one  # one file serves every split
    assert find_file(one, names) is None
    with pytest.raises(DataError) as e:
        split_file(one, "train", ("train.tsv",), "NER", whole_file=False)
    assert str(e.value) == f"NER split 'train' not found: expected train.tsv in {one}"
    with pytest.raises(DataError) as e:
        split_file(str(tmp_path), "test", with_extensions("test", (".jsonl", ".csv")), "prompt-target")
    assert str(e.value) == f"prompt-target split 'test' not found: expected test.jsonl/.csv in {tmp_path}"


def _squad(path, paragraphs):
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}))
    return str(path)


def test_squad_json_reads_paragraphs_and_names_what_is_wrong(tmp_path):
    path = _squad(tmp_path / "a.json", [
        {"context": "Paris is in France.", "qas": [
            {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]},
            {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True}]},
        {"context": "Second.", "qas": [{"id": "q3", "question": "What?"}]}])
    paras = read_squad_json(path)
    assert [p["context"] for p in paras] == ["Paris is in France.", "Second."]
    assert [q["id"] for q in paras[0]["qas"]] == ["q1", "q2"]
    assert paras[0]["qas"][0]["answers"] == [{"text": "France", "answer_start": 12}]
    assert paras[0]["qas"][1]["is_impossible"] is True and paras[0]["qas"][0]["is_impossible"] is False
    assert paras[1]["qas"][0]["answers"] == []
    with pytest.raises(DataError, match="qas\\[0\\]: field 'id' must be a string"):
        read_squad_json(_squad(tmp_path / "b.json", [{"context": "c", "qas": [{"question": "no id"}]}]))
    with pytest.raises(DataError, match="paragraphs\\[0\\]: field 'context' must be a string"):
        read_squad_json(_squad(tmp_path / "c.json", [{"qas": []}]))
    (tmp_path / "d.json").write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(DataError, match="top-level 'data' list"):
        read_squad_json(str(tmp_path / "d.json"))
    with pytest.raises(DataError, match=r"nope\.json not found \(BioASQ layout\)"):
        read_squad_json(str(tmp_path / "nope.json"), "BioASQ layout")


def test_prompt_target_records_per_split(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"instruction": "Add", "input": "1 2", "output": "3"}) + "\n"
                                          + json.dumps({"instruction": "Say hi", "input": "", "output": "hi"}) + "\n")
    (tmp_path / "test.csv").write_text("source,target\na,b\n")
    assert read_pairs(str(tmp_path), "train", to_pair, "prompt-target") == [
        {"prompt": "Add\n\n1 2", "target": "3"}, {"prompt": "Say hi", "target": "hi"}]
    assert read_pairs(str(tmp_path), "test", to_pair, "prompt-target") == [{"prompt": "a", "target": "b"}]
    with pytest.raises(DataError, match="prompt-target split 'dev' not found"):
        read_pairs(str(tmp_path), "dev", to_pair, "prompt-target")
