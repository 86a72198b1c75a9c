"""RACE: parsing, input building, a learnable fine-tuning run, TP2 = one process, `mwb eval race` agrees."""
import json
import os
import subprocess
import sys

import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.race.task import Race, option_text, read_official
from mwb.tasks.race.sample import write_race_sample
from tests.helpers.cli import run_cli
from tests.tasks.encoder_helpers import TOKENIZER, tiny_bert_checkpoint


def test_blank_is_replaced_by_the_option_otherwise_appended():
    assert option_text("Tom went to the _ yesterday.", "park") == "Tom went to the park yesterday."
    assert option_text("Where did Tom go?", "To the park.") == "Where did Tom go? To the park."


def test_truncation_keeps_question_and_option_whole():
    tok = load_tokenizer(TOKENIZER)
    ex = {"article": "word " * 500, "question": "What did Lucy buy this week?",
          "options": ["apples", "bread", "tea", "rice"], "label": 2}
    f = Race().inputs(ex, tok, 64)
    assert f["tokens"].shape == (4, 64) and int(f["label"]) == 2
    for i, opt in enumerate(ex["options"]):
        qa = tok.encode(option_text(ex["question"], opt))
        row, types = f["tokens"][i].tolist(), f["types"][i].tolist()
        second = [t for t, ty in zip(row, types) if ty == 1]
        assert second == qa + [tok.sep]  # the question+option segment survives intact
        assert row[0] == tok.cls and f["padding_mask"][i].sum() == 64  # the article was cut to fit


def test_bundled_sample_and_hf_rows(tmp_path):
    task = Race()
    ex = task.read(task.default_data, "dev")
    assert len(ex) == 48 and {e["level"] for e in ex} == {"middle", "high"}
    rows = tmp_path / "dev.jsonl"
    rows.write_text("\n".join(json.dumps({"example_id": f"high{i}.txt", "article": e["article"],
                                          "question": e["question"], "options": e["options"],
                                          "answer": "ABCD"[e["label"]]}) for i, e in enumerate(ex[:5])))
    got = task.read(str(tmp_path), "dev")
    assert [g["label"] for g in got] == [e["label"] for e in ex[:5]] and got[0]["level"] == "high"


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not valid JSON"),
    (json.dumps({"article": "a", "questions": ["q"], "options": [["a", "b", "c"]], "answers": ["A"]}),
     "field 'options'[0]"),
    (json.dumps({"article": "a", "questions": ["q"], "options": [["a", "b", "c", "d"]], "answers": ["E"]}),
     "field 'answers'[0]"),
    (json.dumps({"questions": ["q"], "options": [["a", "b", "c", "d"]], "answers": ["A"]}), "field 'article'"),
])
def test_malformed_file_names_file_and_field(tmp_path, content, needle):
    d = tmp_path / "dev" / "middle"
    d.mkdir(parents=True)
    (d / "7.txt").write_text(content)
    with pytest.raises(DataError) as e:
        read_official(str(tmp_path / "dev"))
    assert "7.txt" in str(e.value) and needle in str(e.value)


def _mwb(*args):
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _mwb_here(capsys, *args):
    """``mwb ARGS`` in this process (one interpreter and torch import fewer than :func:`_mwb`); ranks that
    ``--nproc`` asks for are still spawned."""
    code, out, err = run_cli(list(args), capsys)
    assert code in (0, None), err[-3000:]
    return out


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "split" not in r]


@pytest.mark.multiprocess
def test_finetune_learns_tp2_matches_and_eval_reproduces(tmp_path, capsys):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"))
    data = write_race_sample(str(tmp_path / "race"), {"train": 32, "dev": 12}, seed=5, easy=True)
    common = ["race", "--checkpoint", ckpt, "--data", data, "--epochs", "2", "--lr", "1e-3",
              "--global-batch-size", "8", "--micro-batch-size", "4"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _mwb_here(capsys, "finetune", *common, "--out", one)
    res = json.load(open(os.path.join(one, "results.json")))
    assert res["metrics"]["accuracy"] >= 0.7  # chance is 0.25
    assert os.path.isdir(res["best_checkpoint"])
    _mwb_here(capsys, "finetune", *common, "--out", two, "--nproc", "2", "--tp", "2")
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 16
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5
    out = _mwb_here(capsys, "eval", "race", "--checkpoint", one, "--data", data, "--out", str(tmp_path / "ev"))
    ev = json.load(open(os.path.join(tmp_path, "ev", "results.json")))
    assert ev["metrics"]["accuracy"] == res["metrics"]["accuracy"], out
