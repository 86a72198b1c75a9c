"""predictions.jsonl: atomic writing, strict reading (one line naming the file and line), stable ids, and the one
aggregate definition — means, entity F1 from tp/fp/fn (checked against seqeval and sklearn on label sequences
built from the same counts) and perplexity from NLL parts."""
import hashlib
import json
import math
import os

import numpy as np
import pytest
from seqeval.metrics import f1_score as seqeval_f1
from sklearn.metrics import f1_score, precision_score, recall_score

from mwb.core.errors import DataError
from mwb.evaluation.predictions import aggregate, is_binary, item_id, read_predictions, write_predictions


def test_write_read_roundtrip_from_file_and_run_dir(tmp_path):
    recs = [{"id": "q1", "prediction": "Paris", "gold": ["Paris"], "em": 1},
            {"id": "q2", "prediction": "Rome", "gold": ["Milan"], "em": 0, "note": "é"}]
    path = write_predictions(str(tmp_path / "run"), recs)
    assert path == str(tmp_path / "run" / "predictions.jsonl")
    assert os.listdir(tmp_path / "run") == ["predictions.jsonl"]  # no temporary left behind
    assert read_predictions(path) == recs
    assert read_predictions(str(tmp_path / "run")) == recs
    with open(path) as f:
        assert [json.loads(line)["id"] for line in f] == ["q1", "q2"]


def test_write_accepts_numpy_values(tmp_path):
    path = write_predictions(str(tmp_path), [{"id": "a", "acc": np.int64(1), "scores": np.array([0.5, 0.25])}])
    assert read_predictions(path) == [{"id": "a", "acc": 1, "scores": [0.5, 0.25]}]


@pytest.mark.parametrize("recs, needle", [
    ([{"id": "a"}, {"id": "a"}], "duplicate id 'a'"),
    ([{"id": 3}], "no string 'id'"),
    ([{"prediction": "x"}], "no string 'id'"),
    ([{"id": "a", "v": float("nan")}], "not plain JSON"),
])
def test_write_rejects_bad_records_and_writes_nothing(tmp_path, recs, needle):
    with pytest.raises(DataError, match=needle):
        write_predictions(str(tmp_path), recs)
    assert not os.path.exists(tmp_path / "predictions.jsonl")


@pytest.mark.parametrize("text, needle", [
    ('{"id": "a"}\n{"id": "b"\n', "line 2: not valid JSON"),
    ('{"id": "a"}\n[1, 2]\n', "line 2: expected a JSON object"),
    ('{"id": "a"}\n{"x": 1}\n', "line 2: no string 'id'"),
    ('{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n', "line 3: duplicate id 'a' (first on line 1)"),
    ("", "no predictions (the file is empty)"),
    ("\n  \n", "no predictions (the file is empty)"),
])
def test_read_errors_are_one_line_naming_file_and_line(tmp_path, text, needle):
    path = tmp_path / "predictions.jsonl"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        read_predictions(str(path))
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and needle in msg


def test_read_missing_paths(tmp_path):
    with pytest.raises(DataError, match="predictions file not found"):
        read_predictions(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="run directory has no predictions.jsonl"):
        read_predictions(str(tmp_path))


def test_item_id_is_sha1_of_canonical_json():
    expected = hashlib.sha1(json.dumps([{"a": 1, "b": "é"}, "q"], sort_keys=True, ensure_ascii=False,
                                       separators=(",", ":")).encode()).hexdigest()[:16]
    assert item_id({"b": "é", "a": 1}, "q") == item_id({"a": 1, "b": "é"}, "q") == expected
    assert item_id("q") != item_id("q ") and len(item_id("q")) == 16
    with pytest.raises(DataError, match="not plain JSON"):
        item_id(object())


def test_mean_metric_aggregate_and_is_binary():
    recs = [{"id": str(i), "acc": v, "score": s} for i, (v, s) in enumerate([(1, 0.5), (0, 0.25), (True, 2.0)])]
    assert aggregate(recs, "acc") == pytest.approx(2 / 3)
    assert aggregate(recs, "score") == pytest.approx(2.75 / 3)
    assert is_binary([r["acc"] for r in recs]) and is_binary(np.array([0.0, 1.0]))
    assert not is_binary([r["score"] for r in recs]) and not is_binary([]) and not is_binary(["1", 0])
    assert not is_binary([{"tp": 1, "fp": 0, "fn": 0}]) and not is_binary(np.array([0, 2]))


def _label_vectors(counts):
    """Binary label vectors with exactly the given tp/fp/fn (plus true negatives), and entity-tag sequences
    (one single-token entity per count) for seqeval, one sentence per item."""
    y_true, y_pred, s_true, s_pred = [], [], [], []
    for tp, fp, fn in counts:
        t = [1] * tp + [0] * fp + [1] * fn + [0, 0]
        p = [1] * tp + [1] * fp + [0] * fn + [0, 0]
        y_true += t
        y_pred += p
        s_true.append(["O"] + [x for v in t for x in (("B-CHEM" if v else "O"), "O")])
        s_pred.append(["O"] + [x for v in p for x in (("B-CHEM" if v else "O"), "O")])
    return y_true, y_pred, s_true, s_pred


def test_entity_f1_parts_equal_sklearn_and_seqeval():
    rng = np.random.default_rng(3)
    counts = [tuple(int(c) for c in rng.integers(0, 4, size=3)) for _ in range(40)]
    recs = [{"id": str(i), "entity_f1": {"tp": tp, "fp": fp, "fn": fn},
             "entity_precision": {"tp": tp, "fp": fp, "fn": fn}, "entity_recall": {"tp": tp, "fp": fp, "fn": fn}}
            for i, (tp, fp, fn) in enumerate(counts)]
    y_true, y_pred, s_true, s_pred = _label_vectors(counts)
    assert aggregate(recs, "entity_f1") == pytest.approx(f1_score(y_true, y_pred), abs=1e-12)
    assert aggregate(recs, "entity_f1") == pytest.approx(seqeval_f1(s_true, s_pred), abs=1e-12)
    assert aggregate(recs, "entity_precision") == pytest.approx(precision_score(y_true, y_pred), abs=1e-12)
    assert aggregate(recs, "entity_recall") == pytest.approx(recall_score(y_true, y_pred), abs=1e-12)
    # the corpus F1 is not the mean of per-item F1s (why items carry parts)
    per_item = [2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0 for tp, fp, fn in counts]
    assert abs(aggregate(recs, "entity_f1") - np.mean(per_item)) > 1e-3


@pytest.mark.parametrize("gold, pred", [
    (np.random.default_rng(5).integers(0, 2, 60), np.random.default_rng(6).integers(0, 2, 60)),
    (np.array([0, 1, 1, 0, 1]), np.zeros(5, dtype=int)),  # a constant classifier: class 1's F1 is 0
    (np.zeros(4, dtype=int), np.zeros(4, dtype=int)),  # class 1 absent and never predicted
])
def test_binary_macro_f1_from_confusion_cells_equals_sklearn(gold, pred):
    recs = [{"id": str(i), "macro_f1": {"tp": int(p and g), "fp": int(p and not g), "fn": int(g and not p),
                                        "tn": int(not p and not g)}} for i, (g, p) in enumerate(zip(gold, pred))]
    want = f1_score(gold, pred, average="macro", labels=[0, 1], zero_division=0)
    assert aggregate(recs, "macro_f1") == pytest.approx(want, abs=1e-12)


def test_f1_with_nothing_to_find_is_zero():
    assert aggregate([{"id": "a", "f1": {"tp": 0, "fp": 0, "fn": 0}}], "f1") == 0.0


def test_perplexity_and_loss_from_nll_parts():
    nll, tokens = [12.0, 3.5, 40.25], [10, 2, 31]
    recs = [{"id": str(i), "ppl": {"nll": a, "tokens": t}, "val_loss": {"nll": a, "tokens": t}}
            for i, (a, t) in enumerate(zip(nll, tokens))]
    assert aggregate(recs, "ppl") == pytest.approx(math.exp(sum(nll) / sum(tokens)), rel=1e-12)
    assert aggregate(recs, "val_loss") == pytest.approx(sum(nll) / sum(tokens), rel=1e-12)


@pytest.mark.parametrize("recs, metric, needle", [
    ([{"id": "a", "acc": 1}, {"id": "b"}], "acc", "item 'b' has no metric 'acc'"),
    ([{"id": "a", "acc": "1"}], "acc", "not a number"),
    ([{"id": "a", "acc": None}], "acc", "not a number"),
    ([{"id": "a", "acc": float("nan")}], "acc", "not a finite number"),
    ([{"id": "a", "acc": 1}, {"id": "b", "acc": {"tp": 1, "fp": 0, "fn": 0}}], "acc", "same form"),
    ([{"id": "a", "f1": {"tp": 1, "fp": 0}}], "f1", "exactly the keys"),
    ([{"id": "a", "f1": {"tp": -1, "fp": 0, "fn": 0}}], "f1", "negative part"),
    ([{"id": "a", "acc": {"nll": 1.0, "tokens": 2}}], "acc", "need a name"),
    ([{"id": "a", "ppl": {"nll": 1.0, "tokens": 0}}], "ppl", "positive token count"),
])
def test_bad_metric_values_are_data_errors(recs, metric, needle):
    with pytest.raises(DataError, match=needle):
        aggregate(recs, metric)
