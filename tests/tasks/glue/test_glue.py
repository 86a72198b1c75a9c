"""GLUE: the official TSV layouts (by header name, extra columns ignored), labels, inputs, the submission file,
and a fine-tuning run (STS-B regression) that `mwb eval glue` reproduces and that writes a test submission."""
import json
import os

import numpy as np
import pytest
import torch

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.glue.task import Glue
from mwb.tasks.glue.data import read_glue
from mwb.tasks.api.objectives import REGRESSION
from tests.helpers.cli import run_cli
from tests.tasks.glue.helpers import write_easy_stsb, write_mnli, write_tsv
from tests.tasks.encoder_helpers import TOKENIZER, tiny_bert_checkpoint


def test_mnli_layout_with_extra_columns_reads_unchanged(tmp_path):
    write_mnli(str(tmp_path))
    task = Glue(task="mnli")
    for root in (str(tmp_path), str(tmp_path / "MNLI")):  # GLUE root or the task directory
        dev = task.read(root, "dev")
        assert [e["label"] for e in dev] == [0, 1, 2, 0, 1, 2]
        assert dev[0]["text"] == ['The dev_matched "quoted man 0 sleeps.', "A man 0 rests."]
    assert task.read(str(tmp_path), "dev_mismatched")[1]["text"][0].startswith("The dev_mismatched")
    test = task.read(str(tmp_path), "test")
    assert all(e["label"] is None for e in test) and test[3]["index"] == "3"
    with pytest.raises(ConfigError, match="--submission"):
        Glue(task="mnli", split="test").load(str(tmp_path))


@pytest.mark.parametrize("name,header,row,text,label", [
    ("qqp", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], [7, 1, 2, "q a?", "q b?", 1],
     ["q a?", "q b?"], 1),
    ("mrpc", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], [0, 11, 12, "s one", "s two"],
     ["s one", "s two"], 0),
    ("sst2", ["sentence", "label"], ["it 's a \"great\" film ", 1], ["it 's a \"great\" film "], 1),
    ("qnli", ["index", "question", "sentence", "label"], [0, "who?", "him.", "not_entailment"], ["who?", "him."], 1),
    ("rte", ["index", "sentence1", "sentence2", "label"], [0, "a", "b", "entailment"], ["a", "b"], 0),
    ("cola", None, ["gj04", 1, "", "The book was read."], ["The book was read."], 1),
    ("stsb", ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
              "score"], [0, "g", "f", "y", 0, "s", "s", "a plane", "an air plane", "4.800"],
     ["a plane", "an air plane"], 4.8),
])
def test_each_official_layout(tmp_path, name, header, row, text, label):
    ex = read_glue(write_tsv(str(tmp_path / "dev.tsv"), header, [row]), name)
    assert ex[0]["text"] == text and ex[0]["label"] == label


def test_cola_test_file_has_a_header(tmp_path):
    ex = read_glue(write_tsv(str(tmp_path / "test.tsv"), ["index", "sentence"], [[5, "Bill left."]]), "cola")
    assert ex == [{"index": "5", "text": ["Bill left."], "label": None}]


@pytest.mark.parametrize("header,row,needle", [
    (["index", "sentence1", "label"], [0, "a", "entailment"], "no column 'sentence2'"),
    (["index", "sentence1", "sentence2", "label"], [0, "a", "b", "maybe"], "line 2: column 'label' must be one of"),
    (["index", "sentence1", "sentence2", "label"], [0, "a"], "line 2: 2 columns"),
])
def test_bad_file_names_the_file_line_and_column(tmp_path, header, row, needle):
    path = write_tsv(str(tmp_path / "train.tsv"), header, [row])
    with pytest.raises(DataError) as e:
        read_glue(path, "rte")
    assert path in str(e.value) and needle in str(e.value)


def test_inputs_single_and_pair():
    tok = load_tokenizer(TOKENIZER)
    one = Glue(task="sst2").inputs({"text": ["a fine film"], "label": 1}, tok, 16)
    ids = tok.encode("a fine film")
    assert one["tokens"][: len(ids) + 2].tolist() == [tok.cls] + ids + [tok.sep]
    assert one["padding_mask"].sum() == len(ids) + 2 and one["types"].sum() == 0 and int(one["label"]) == 1
    two = Glue(task="stsb").inputs({"text": ["a b", "c"], "label": 3.5}, tok, 16)
    assert two["label"].dtype == np.float32 and float(two["label"]) == 3.5
    assert two["types"].sum() == len(tok.encode("c")) + 1


def test_metrics_per_task_and_submission(tmp_path):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    preds, golds = [1, 0, 1, 1, 0, 0, 1], [1, 1, 0, 1, 0, 1, 1]
    examples = [{"index": str(i), "label": g} for i, g in enumerate(golds)]
    qqp, cola = Glue(task="qqp").metrics(preds, examples), Glue(task="cola").metrics(preds, examples)
    assert list(qqp) == ["accuracy", "f1", "count"] and list(cola) == ["accuracy", "matthews", "count"]
    assert qqp["accuracy"] == cola["accuracy"] == pytest.approx(accuracy_score(golds, preds), abs=1e-12)
    assert qqp["f1"] == pytest.approx(f1_score(golds, preds, pos_label=1), abs=1e-12)
    assert cola["matthews"] == pytest.approx(matthews_corrcoef(golds, preds), abs=1e-12)
    scores = [{"index": str(i), "label": g} for i, g in enumerate([2.0, 4.0, 6.5])]
    assert Glue(task="stsb").metrics([1.0, 2.0, 3.0], scores)["spearman"] == pytest.approx(1.0)
    sub = str(tmp_path / "sub" / "QNLI.tsv")
    task = Glue(task="qnli", submission=sub)
    unlabelled = [{"index": "4", "label": None}, {"index": "9", "label": None}]
    metrics, records = task.evaluation([1, 0], unlabelled)
    assert metrics == {"count": 2}
    assert task.files(metrics, records, unlabelled) == {sub: "index\tprediction\n4\tnot_entailment\n9\tentailment\n"}
    assert Glue(task="cola").metric == "matthews" and Glue(task="stsb").objective is REGRESSION
    with pytest.raises(ConfigError, match="--task must be one of mnli.*got 'wnli'"):
        Glue(task="wnli")


def test_regression_head_is_summed_squared_error():
    from mwb.core.config import RunConfig, update
    from mwb.core.parallel.state import single_process_state
    from mwb.core.presets import apply_preset
    from mwb.tasks.api.encoder_model import build_task_model, predict
    cfg = update(apply_preset(RunConfig(), "bert-tiny"), {"model": {"num_layers": 1, "hidden_size": 32,
                                                                    "num_attention_heads": 2, "dropout": 0.0}})
    model = build_task_model(cfg.model, single_process_state(), 100, "regression", 1, 1)
    tokens, labels = torch.randint(5, 100, (3, 8)), torch.tensor([0.5, 2.0, 4.0])
    loss, count = model(tokens, labels=labels)
    scores = model(tokens).squeeze(-1)
    assert count == 3 and loss.item() == pytest.approx(((scores - labels) ** 2).sum().item(), rel=1e-6)
    feats = [{"tokens": t.numpy(), "label": np.float32(0)} for t in tokens]
    from mwb.tasks.glue.task import Glue
    decode = Glue(task="stsb").decode  # the regression decode: the score
    assert predict(model, feats, 2, "cpu", decode) == pytest.approx(scores.tolist(), rel=1e-5)


def _mwb(capsys, *args):
    code, out, err = run_cli(list(args), capsys)
    assert code in (0, None), err[-3000:]
    return out


def test_stsb_finetune_learns_and_eval_reproduces_and_writes_submission(tmp_path, capsys):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=32)
    data = write_easy_stsb(str(tmp_path / "STS-B"))
    out = str(tmp_path / "ft")
    _mwb(capsys, "finetune", "glue", "--task", "stsb", "--checkpoint", ckpt, "--data", data, "--epochs", "4",
         "--lr", "1e-2", "--global-batch-size", "8", "--micro-batch-size", "8", "--keep-last", "1", "--out", out)
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["metrics"]["pearson"] > 0.5
    from scipy.stats import pearsonr, spearmanr
    with open(os.path.join(out, "predictions.jsonl")) as f:  # the best epoch's dev predictions
        recs = [json.loads(line) for line in f]
    pred, gold = [r["prediction"] for r in recs], [r["gold"] for r in recs]
    assert res["metrics"]["spearman"] == pytest.approx(spearmanr(pred, gold).statistic, abs=1e-9)
    assert res["metrics"]["pearson"] == pytest.approx(pearsonr(pred, gold).statistic, abs=1e-9)
    ckpts = os.path.join(out, "checkpoints")  # --keep-last 1: the newest epoch and the best survive
    left = sorted(n for n in os.listdir(ckpts) if n.startswith("step_"))
    best, latest = (open(os.path.join(ckpts, n)).read().strip() for n in ("best", "latest"))
    assert set(left) == {best, latest} and res["best_checkpoint"].endswith(best)
    ev = str(tmp_path / "ev")
    _mwb(capsys, "eval", "glue", "--task", "stsb", "--checkpoint", out, "--data", data, "--out", ev)
    assert json.load(open(os.path.join(ev, "results.json")))["metrics"]["pearson"] == \
        pytest.approx(res["metrics"]["pearson"], abs=1e-6)
    sub = str(tmp_path / "STS-B.tsv")
    _mwb(capsys, "eval", "glue", "--task", "stsb", "--split", "test", "--submission", sub, "--checkpoint", out,
         "--data", data, "--out", str(tmp_path / "ev2"))
    lines = open(sub).read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 5 and [ln.split("\t")[0] for ln in lines[1:]] == \
        ["0", "1", "2", "3"]
    float(lines[1].split("\t")[1])


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "loss" in r and "split" not in r]


@pytest.mark.multiprocess
def test_stsb_regression_tp2_matches_one_process(tmp_path):
    import subprocess
    import sys
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=32)
    data = write_easy_stsb(str(tmp_path / "STS-B"), sizes=(("train", 16), ("dev", 8)))
    common = ["finetune", "glue", "--task", "stsb", "--checkpoint", ckpt, "--data", data, "--epochs", "2",
              "--lr", "1e-2", "--global-batch-size", "8", "--micro-batch-size", "4"]
    runs = []
    for name, extra in (("one", []), ("two", ["--nproc", "2", "--tp", "2"])):
        out = str(tmp_path / name)
        proc = subprocess.run([sys.executable, "-m", "mwb", *common, *extra, "--out", out], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(_losses(out))
    a, b = runs
    assert len(a) == len(b) == 4
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5
