"""``mwb finetune dpr`` against its own start: an ICT bi-encoder trained here on 20-token passages.

At ``--lr 0`` (typed alone: the retriever commands' schedules floor at 0) the saved retriever keeps every setting of
the start — its passage length above all, which ``--seq-length``'s default (128) used to replace — and ranks and
scores every question exactly as the start does. A ``--seq-length`` the user types is used, and said.
"""
import json

import numpy as np
import pytest

pytest.importorskip("faiss")

from tests.helpers.cli import run_cli

from .retrieval_helpers import make_tokenizer, passages, question_for, sentence_text, write_dpr_json
from .test_e2e_start import START_LENGTH, TINY, _dense, _settings


@pytest.fixture(scope="module")
def ict(tmp_path_factory):
    d = tmp_path_factory.mktemp("dpr-start")
    tok = make_tokenizer(str(d / "tok"))
    texts = passages(16, seed=4, length=30)
    with open(d / "ev.tsv", "w") as f:
        f.write("id\ttext\ttitle\n" + "".join(f"p{i}\t{sentence_text(t)}\tw{i}\n" for i, t in enumerate(texts)))
    rng = np.random.default_rng(2)
    questions = [question_for(t, rng) for t in texts]
    out = str(d / "ict")
    mp = pytest.MonkeyPatch()
    mp.setenv("MWB_CACHE", str(d / "cache"))
    code = _cli(["pretrain", "ict", "--evidence", str(d / "ev.tsv"), "--tokenizer", tok, "--steps", "3",
                 "--seq-length", str(START_LENGTH), "--query-length", "8", "--micro-batch-size", "8",
                 "--global-batch-size", "8", "--eval-interval", "0", "--out", out, *TINY])
    mp.undo()
    assert code == 0
    return {"dir": d, "ict": out, "ev": str(d / "ev.tsv"), "questions": questions,
            "dpr": write_dpr_json(str(d / "dpr.json"), 16, seed=6)}


def _cli(argv):
    from .test_e2e_start import _cli as cli
    return cli(argv)[0]


def _dpr(ict, out, capsys, *extra):
    code, _, err = run_cli(["finetune", "dpr", "--checkpoint", ict["ict"], "--data", ict["dpr"], "--steps", "2",
                            "--lr", "0", "--micro-batch-size", "4", "--global-batch-size", "4", "--eval-interval",
                            "0", "--out", out, *extra], capsys)
    assert code == 0, err
    with open(f"{out}/checkpoints/latest") as f:
        return f"{out}/checkpoints/{f.read().strip()}", err


def test_lr0_dpr_run_keeps_the_start_and_ranks_as_it(ict, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    saved, err = _dpr(ict, str(tmp_path / "dpr"), capsys)
    assert "passages are cut" not in err
    assert _settings(saved) == _settings(ict["ict"]) and _settings(saved).context_length == START_LENGTH
    before, after = _dense(ict["ict"], ict["ev"]), _dense(saved, ict["ev"])
    s0, r0 = before.retrievers["dpr"].search(ict["questions"], 8)
    s1, r1 = after.retrievers["dpr"].search(ict["questions"], 8)
    np.testing.assert_array_equal(r1, r0)
    np.testing.assert_allclose(s1, s0, rtol=0, atol=1e-5)
    assert len({tuple(r) for r in r0}) > 1  # the start ranks questions differently: the comparison means something
    res = json.load(open(tmp_path / "dpr" / "results.json"))
    assert res["biencoder"]["context_length"] == START_LENGTH


def test_a_typed_seq_length_is_used_and_said(ict, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    saved, err = _dpr(ict, str(tmp_path / "dpr32"), capsys, "--seq-length", "32")
    assert _settings(saved).context_length == 32
    assert f"passages are cut at 32 tokens (--seq-length), not at the {START_LENGTH}" in err
