"""WikiText detokenizer rules, the sliding window's coverage, task option parsing and the registry."""
import pytest

from mwb.core.config import ConfigError
from mwb.evaluation.detokenizers import detokenizer_for, wikitext_detokenizer
from mwb.evaluation.windows import rolling_windows
from mwb.tasks.api.base import Option, Task, parse_task_args
from mwb.tasks.api.registry import get_task, list_tasks, register


def test_wikitext_detokenizer_rules():
    src = (" = = = Early life = = = \n The 2 @,@ 000 @-@ seat hall ( built 1 @.@ 5 years ago ) is \" big \" , "
           "isn 't it ? Yes : very ; really . The players ' union 's view ! \n")
    out = wikitext_detokenizer(src)
    assert out == (" === Early life ===\nThe 2,000-seat hall (built 1.5 years ago) is \"big\", "
                   "isn 't it? Yes: very; really. The players' union's view!\n")
    assert detokenizer_for("/x/wiki.test.tokens") is wikitext_detokenizer


@pytest.mark.parametrize("n,seq,stride", [(2, 4, 4), (10, 4, 4), (10, 4, 1), (37, 8, 3), (9, 8, 8), (100, 16, 5)])
def test_rolling_windows_score_each_token_once(n, seq, stride):
    ids = list(range(1000, 1000 + n))
    scored = []
    for start, window, skip in rolling_windows(ids, seq, stride):
        assert window == ids[start:start + len(window)] and len(window) <= seq + 1
        assert skip >= 0
        new = [start + 1 + j for j in range(skip, len(window) - 1)]
        # every newly scored token has min(position, seq - stride) tokens of context at least
        assert all(t - start >= min(t, seq - stride) for t in new)
        scored += new
    assert scored == list(range(1, n))
    with pytest.raises(ConfigError):
        list(rolling_windows(ids, seq, seq + 1))


def test_registry_and_options():
    tasks = list_tasks()
    assert {"lambada", "wikitext"} <= set(tasks)
    assert get_task("WikiText-103") is tasks["wikitext"]
    with pytest.raises(ConfigError, match="unknown task"):
        get_task("nope")
    opts = parse_task_args(tasks["lambada"], ["--strict", "--seq-length=32", "--batch-size", "2"])
    assert opts == {"strict": True, "seq_length": 32, "batch_size": 2}
    assert parse_task_args(tasks["wikitext"], ["--no-detokenize"]) == {"detokenize": False}
    with pytest.raises(ConfigError, match="no option --bogus"):
        parse_task_args(tasks["lambada"], ["--bogus", "1"])
    with pytest.raises(ConfigError, match="expects int"):
        parse_task_args(tasks["lambada"], ["--seq-length", "x"])

    @register("_unit_test_task")
    class Dummy(Task):
        options = {"k": Option(int, 3)}
    assert get_task("_unit_test_task") is Dummy and Dummy(k=5).opts == {"k": 5}
    with pytest.raises(ConfigError):
        Dummy(z=1)


def test_load_records_formats(tmp_path, monkeypatch):
    from mwb.core.errors import DataError
    from mwb.evaluation.task_data import _read_jsonl, load_records
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": "two"}\n')
    (tmp_path / "b.csv").write_text("text,label\nhello,1\nworld,0\n")
    assert load_records(str(tmp_path / "a.jsonl")) == [{"text": "one"}, {"text": "two"}]
    assert _read_jsonl(str(tmp_path / "a.jsonl")) == [{"text": "one"}, {"text": "two"}]  # no-`datasets` path
    assert load_records(str(tmp_path / "b.csv"))[1] == {"text": "world", "label": 0}
    with pytest.raises(DataError, match="not found"):
        load_records(str(tmp_path / "missing.jsonl"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="offline"):
        load_records("some_hub_dataset")
