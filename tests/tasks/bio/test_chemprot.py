"""ChemProt (BLUE layout): the reader, micro F1 over the CPR classes (false excluded) = scikit-learn, a run."""
import json
import os
import random

import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.bio.classification_metrics import micro_prf
from mwb.tasks.bio.chemprot import LABELS, RELATIONS, ChemProt, read_blue_tsv
from tests.tasks.encoder_helpers import TOKENIZER, tiny_bert_checkpoint
from tests.tasks.race.test_race import _mwb


def test_all_false_prediction_scores_zero():
    gold = ["CPR:3", "false", "CPR:9", "CPR:4"]
    assert micro_prf(["false"] * 4, gold, RELATIONS)["f1"] == 0.0


def test_hand_computed_confusion():
    gold = ["CPR:3", "CPR:4", "false", "false", "CPR:9", "CPR:3"]
    pred = ["CPR:3", "CPR:3", "CPR:4", "false", "false", "CPR:3"]
    # CPR predictions: rows 0, 1, 2, 5 (row 2 is a false pair: a false positive for CPR:4); correct: 0, 5
    # gold CPR pairs: rows 0, 1, 4, 5 → P = 2/4, R = 2/4
    got = micro_prf(pred, gold, RELATIONS)
    assert (got["tp"], got["predicted"], got["gold"]) == (2, 4, 4)
    assert got["precision"] == got["recall"] == got["f1"] == 0.5
    task = ChemProt()
    ids = [LABELS.index(x) for x in pred]
    assert task.metrics(ids, [{"label": LABELS.index(x)} for x in gold])["f1"] == 0.5


def test_equals_scikit_learn_micro_over_cpr_classes():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 30)
        gold = [rng.choice(LABELS) for _ in range(n)]
        pred = [rng.choice(LABELS) for _ in range(n)]
        p, r, f, _ = metrics.precision_recall_fscore_support(gold, pred, labels=list(RELATIONS), average="micro",
                                                             zero_division=0)
        got = micro_prf(pred, gold, RELATIONS)
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((p, r, f))


def test_reader_markers_and_errors(tmp_path):
    task = ChemProt()
    rows = task.read(task.default_data, "dev")
    assert {LABELS[r["label"]] for r in rows} == set(LABELS)
    tok = load_tokenizer(TOKENIZER)
    f = task.inputs(rows[0], tok, 64)
    assert f["tokens"][0] == tok.cls and int(f["label"]) == rows[0]["label"]
    (tmp_path / "dev.tsv").write_text('sentence\tlabel\n')
    with pytest.raises(DataError, match="header"):
        task.read(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text('index\tsentence\tlabel\n0\t"@CHEMICAL$ binds @GENE$\tCPR:7\n')
    with pytest.raises(DataError, match="dev.tsv:2: label 'CPR:7'"):
        task.read(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text('index\tsentence\tlabel\n0\t"quoted" @CHEM-GENE$ level\tfalse\n')
    assert task.read(str(tmp_path), "dev")[0]["sentence"] == '"quoted" @CHEM-GENE$ level'


@pytest.mark.multiprocess
def test_finetune_on_the_bundled_sample_and_eval_reproduces(tmp_path):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=64)
    out = str(tmp_path / "run")
    _mwb("finetune", "chemprot", "--checkpoint", ckpt, "--epochs", "1", "--lr", "2e-3", "--global-batch-size",
         "16", "--micro-batch-size", "16", "--out", out)
    res = json.load(open(os.path.join(out, "results.json")))["metrics"]
    assert res["count"] == 48 and {"precision", "recall", "f1", "accuracy"} <= set(res)
    _mwb("eval", "chemprot", "--checkpoint", out, "--out", str(tmp_path / "ev"))
    ev = json.load(open(os.path.join(tmp_path, "ev", "results.json")))["metrics"]
    assert (ev["f1"], ev["accuracy"], ev["predicted"]) == (res["f1"], res["accuracy"], res["predicted"])
