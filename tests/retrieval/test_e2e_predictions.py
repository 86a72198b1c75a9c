"""``mwb finetune e2e-qa`` writes one record per held-out question (``OUT/predictions.jsonl``) whose means are
``results.json``'s held-out metrics, before and after; and the answerable-question filter it starts from."""
import json
import os

import numpy as np
import pytest

pytest.importorskip("faiss")

from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.retrieval.e2e.evaluate import with_before
from mwb.retrieval.e2e.train import answerable
from mwb.retrieval.matching import normalize, simple_tokens
from mwb.retrieval.inputs import Evidence
from tests.helpers.cli import run_cli

from .test_e2e_start import RUN_LENGTH, start  # noqa: F401  (the tiny ICT start and its data, a fixture)

METRICS = ("top1", "top5", "top20", "em", "em_random")


def test_e2e_run_writes_per_question_records_whose_means_are_its_results(start, tmp_path, monkeypatch,  # noqa: F811
                                                                         capsys):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    out = str(tmp_path / "run")
    code, _, err = run_cli(["finetune", "e2e-qa", "--retriever", start["ict"], "--reader", start["reader"],
                            "--method", "individual", "--evidence", start["ev"], "--questions", start["q"],
                            "--steps", "2", "--lr", "1e-3", "--refresh-every", "1", "--top-k", "3",
                            "--seq-length", str(RUN_LENGTH), "--reader-length", "48", "--micro-batch-size", "2",
                            "--global-batch-size", "2", "--eval-questions", "0", "--out", out], capsys)
    assert code == 0, err
    assert "predictions.jsonl (one record per held-out question)" in err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    records = read_predictions(out)
    assert len(records) == metrics["questions"] == 6  # 24 questions, every 4th held out
    assert len({r["id"] for r in records}) == len(records)
    for m in METRICS:
        for name in (m, f"{m}_before"):
            assert {r[name] for r in records} <= {0, 1}, name
            assert aggregate(records, name) == pytest.approx(metrics[name], abs=1e-12), name
    for r in records:  # the top-k values follow the first answer-bearing rank
        rank = r["hit_rank"]
        assert [r["top1"], r["top5"], r["top20"]] == [int(rank is not None and rank < k) for k in (1, 5, 20)]
        assert isinstance(r["prediction"], str) and r["gold"]


def test_with_before_pairs_records_by_id():
    after = [{"id": "a", "question": "q", "gold": ["x"], "top1": 1, "em": 0, "prediction": "y"}]
    before = [{"id": "a", "question": "q", "gold": ["x"], "top1": 0, "em": 1, "prediction": "x"}]
    (merged,) = with_before(after, before)
    assert merged == {**after[0], "top1_before": 0, "em_before": 1, "prediction_before": "x"}
    with pytest.raises(ValueError, match="differ"):
        with_before(after, [{**before[0], "id": "b"}])
    with pytest.raises(ValueError):
        with_before(after, before * 2)


def _brute(records, texts):
    """DPR's has-answer rule written out: the answer's tokens contiguous somewhere in a passage's tokens."""
    passages = [simple_tokens(normalize(t)) for t in texts]

    def found(answer):
        a = simple_tokens(normalize(answer))
        return bool(a) and any(p[i:i + len(a)] == a for p in passages for i in range(len(p) - len(a) + 1))
    return [r for r in records if any(found(a) for a in r["answers"])]


def test_answerable_is_dprs_has_answer_rule():
    texts = ["The Bank of England was founded in 1694.", "Paris is the capital of France",
             "Ab c d e f g h", "x y"]
    ev = Evidence("toy", ids=[str(i) for i in range(len(texts))], texts=texts, titles=[""] * len(texts))
    answers = [["1694"], ["bank of england"], ["Bank of Scotland"], ["capital of France"], ["France capital"],
               ["c d e f g h"], ["g h i"], [""], ["!!"], ["x"], ["y z"], ["nothing", "Paris"], ["ab C"],
               ["England was founded in 1694"], ["founded 1694"]]
    records = [{"question": f"q{i}", "answers": a} for i, a in enumerate(answers)]
    got = answerable(records, ev)
    assert got == _brute(records, texts)
    assert [r["question"] for r in got] == ["q0", "q1", "q3", "q5", "q9", "q11", "q12", "q13"]
    rng = np.random.default_rng(0)  # random answers cut from the passages, and perturbed ones
    words = " ".join(texts).split()
    rand = [{"question": str(i), "answers": [" ".join(words[s:s + n])] if i % 2 else
             [" ".join(rng.permutation(words[s:s + n]))]}
            for i, (s, n) in enumerate(zip(rng.integers(0, len(words) - 4, 200), rng.integers(1, 5, 200)))]
    assert answerable(rand, ev) == _brute(rand, texts)
