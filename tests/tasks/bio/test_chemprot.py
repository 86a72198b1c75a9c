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
from tests.helpers.cli import run_cli
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


def _assert_scikit_learn_agrees(out: str, res: dict) -> None:
    """The run's precision / recall / micro F1 (CPR classes) and accuracy, recomputed with scikit-learn from the
    (prediction, gold) labels of its records."""
    metrics = pytest.importorskip("sklearn.metrics")
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    pred, gold = [r["prediction"] for r in recs], [r["gold"] for r in recs]
    assert len(recs) == res["count"] and set(pred) | set(gold) <= set(LABELS)
    p, r, f, _ = metrics.precision_recall_fscore_support(gold, pred, labels=list(RELATIONS), average="micro",
                                                         zero_division=0)
    assert (res["precision"], res["recall"], res["f1"]) == pytest.approx((p, r, f), abs=1e-12)
    assert res["accuracy"] == pytest.approx(metrics.accuracy_score(gold, pred), abs=1e-12)
    assert res["gold"] == sum(g != "false" for g in gold) and res["predicted"] == sum(x != "false" for x in pred)


VERBS = {"CPR:3": "activates", "CPR:4": "inhibits", "CPR:9": "is a substrate of", "false": "is mentioned near"}
LABELS_OF = list(VERBS)


def test_tiny_bert_learns_a_planted_relation_verb(tmp_path, capsys):
    """Each pair's relation is said by its verb: a tiny BERT's dev F1 rises from its first epoch to (near)
    perfect, and the reported numbers equal scikit-learn's on its predictions."""
    rng = random.Random(0)
    fill = ["in the liver", "in rats", "in human cells", "at low doses", "after treatment", "in vitro"]
    for split, n in (("train", 48), ("dev", 16)):
        rows = [f"{i}\t@CHEMICAL$ {VERBS[LABELS_OF[i % 4]]} @GENE$ {rng.choice(fill)} .\t{LABELS_OF[i % 4]}"
                for i in range(n)]
        (tmp_path / f"{split}.tsv").write_text("index\tsentence\tlabel\n" + "\n".join(rows) + "\n")
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=64)
    out = str(tmp_path / "run")
    code, _, err = run_cli(["finetune", "chemprot", "--checkpoint", ckpt, "--data", str(tmp_path), "--epochs", "12",
                            "--lr", "3e-3", "--global-batch-size", "16", "--micro-batch-size", "16", "--seq-length",
                            "32", "--set", "logging.progress=false", "--out", out], capsys)
    assert code in (0, None), err
    run = json.load(open(os.path.join(out, "results.json")))
    f1 = [e["f1"] for e in run["epochs"]]
    assert len(f1) == 12 and max(f1) >= 0.8 and max(f1) - f1[0] >= 0.3, f1
    _assert_scikit_learn_agrees(out, run["metrics"])



@pytest.mark.multiprocess
def test_finetune_on_the_bundled_sample_and_eval_reproduces(tmp_path):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=64)
    out = str(tmp_path / "run")
    _mwb("finetune", "chemprot", "--checkpoint", ckpt, "--epochs", "1", "--lr", "2e-3", "--global-batch-size",
         "16", "--micro-batch-size", "16", "--out", out)
    res = json.load(open(os.path.join(out, "results.json")))["metrics"]
    assert res["count"] == 48
    _assert_scikit_learn_agrees(out, res)
    _mwb("eval", "chemprot", "--checkpoint", out, "--out", str(tmp_path / "ev"))
    ev = json.load(open(os.path.join(tmp_path, "ev", "results.json")))["metrics"]
    assert (ev["f1"], ev["accuracy"], ev["predicted"]) == (res["f1"], res["accuracy"], res["predicted"])
