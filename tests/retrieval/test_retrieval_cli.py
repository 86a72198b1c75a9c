"""The commands end to end, in process, on tiny synthetic data: ``mwb finetune dpr`` writes a checkpoint that
``mwb eval qa`` indexes and evaluates side by side with BM25 (and reuses on the second run), ``mwb pretrain
ict`` trains and resumes, the default-encoder fallback says what it picked, and bad flags fail in one line."""
import json
import os
import string

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("bm25s")

from tests.helpers.cli import run_cli

from .retrieval_helpers import make_tokenizer, passages, sentence_text, write_dpr_json

TINY = ["--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set", "model.num_attention_heads=2",
        "--set", "model.max_position_embeddings=32", "--seq-length", "24", "--query-length", "8",
        "--micro-batch-size", "4", "--global-batch-size", "4", "--eval-interval", "0"]


_run = run_cli


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    tok = make_tokenizer(str(d / "tok"))
    texts = passages(30, seed=21, length=15)
    with open(d / "ev.tsv", "w") as f:
        f.write("id\ttext\ttitle\n" + "".join(f"p{i}\t{sentence_text(t)}\t\n" for i, t in enumerate(texts)))
    rng = np.random.default_rng(0)
    with open(d / "q.tsv", "w") as f:  # NQ-open layout: question <TAB> python-style list of answers
        for t in texts[:12]:
            words = t.split()
            f.write(f"{' '.join(words[:6])}?\t{json.dumps([words[int(rng.integers(6, 15))]])}\n")
    return {"dir": d, "tok": tok, "ev": str(d / "ev.tsv"), "q": str(d / "q.tsv"),
            "dpr": write_dpr_json(str(d / "train.json"), 24, seed=2)}


def _squad_norm(text: str) -> str:
    """SQuAD's answer normalisation, written out here: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def _assert_e2e_values(out: str, m: dict) -> None:
    """Each held-out number of an e2e-qa run, recomputed from its per-question records: ``em`` (and
    ``em_random``, ``em_before``) is the share of readers' answers equal to a gold answer after normalisation,
    ``top{k}`` the share whose first answer-bearing passage ranks below k (and top1 <= top5 <= top20)."""
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    assert len(recs) == m["questions"] > 0
    for when in ("", "_before"):
        for name, pred in (("em", "prediction"), ("em_random", "prediction_random")):
            hand = [int(any(_squad_norm(r[pred + when]) == _squad_norm(g) for g in r["gold"])) for r in recs]
            assert [r[name + when] for r in recs] == hand
            assert m[name + when] == pytest.approx(sum(hand) / len(recs), abs=1e-12)
        for k in (1, 5, 20):
            hits = [int(r["hit_rank" + when] is not None and r["hit_rank" + when] < k) for r in recs]
            assert m[f"top{k}{when}"] == pytest.approx(sum(hits) / len(recs), abs=1e-12)
        assert m["top1" + when] <= m["top5" + when] <= m["top20" + when]


def test_finetune_dpr_then_eval_qa_reusing_the_index(files, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    out = str(tmp_path / "dpr")
    code, so, err = _run(["finetune", "dpr", "--data", files["dpr"], "--tokenizer", files["tok"], "--steps", "2",
                          "--out", out, *TINY], capsys)
    assert code == 0, err
    step = os.path.join(out, "checkpoints", "step_2")
    assert os.path.isfile(os.path.join(step, "biencoder", "biencoder.json"))
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["task"] == "dpr" and 0 <= res["metrics"]["valid_top1"] <= 1 and res["biencoder"]["shared"]
    recs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in recs if "split" not in r] == [1, 2] and recs[-1]["split"] == "valid"

    args = ["eval", "qa", "--checkpoint", out, "--evidence", files["ev"], "--questions", files["q"],
            "--top-k", "1,5"]
    code, so, err = _run(args + ["--out", str(tmp_path / "e1")], capsys)
    assert code == 0, err
    assert "DPR encoder: mwb bi-encoder" in err and "retriever" in err and "bm25" in err
    m = json.load(open(tmp_path / "e1" / "results.json"))["metrics"]
    assert set(m) == {"dpr_top1", "dpr_top5", "bm25_top1", "bm25_top5", "num_questions"}
    assert m["num_questions"] == 12 and m["bm25_top1"] >= 0.75 and m["dpr_top1"] <= m["dpr_top5"]
    code, so, err = _run(args + ["--out", str(tmp_path / "e2"), "--retriever", "dpr"], capsys)
    assert code == 0, err
    assert "reusing cached passage embeddings" in err and "reusing cached faiss index" in err
    m2 = json.load(open(tmp_path / "e2" / "results.json"))["metrics"]
    assert m2["dpr_top1"] == m["dpr_top1"] and "bm25_top1" not in m2

    # continue from the bi-encoder: its weights, settings and tokenizer come with it
    code, so, err = _run(["finetune", "dpr", "--data", files["dpr"], "--checkpoint", out, "--steps", "1",
                          "--out", str(tmp_path / "dpr2"), *TINY[8:]], capsys)
    assert code == 0, err
    assert "initialised from mwb bi-encoder" in err


def test_pretrain_ict_and_resume(files, capsys, tmp_path):
    out = str(tmp_path / "ict")
    base = ["pretrain", "ict", "--evidence", files["ev"], "--tokenizer", files["tok"], "--out", out, *TINY]
    code, _, err = _run(base + ["--steps", "2"], capsys)
    assert code == 0, err
    code, _, err = _run(base + ["--steps", "3", "--resume"], capsys)
    assert code == 0 and "resumed from" in err, err
    recs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in recs if "split" not in r] == [1, 2, 3]


def test_default_encoder_fallback_and_errors(capsys, tmp_path, monkeypatch):
    from mwb.retrieval import qa_system as system
    from mwb.tasks.qa.retrieval import QATask

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(system, "minilm_dir", lambda: None)
    said = []
    path = QATask.default_checkpoint(said.append)
    assert "UNTRAINED" in said[0] and os.path.isfile(os.path.join(path, "biencoder", "biencoder.json"))
    capsys.readouterr()
    code, _, err = _run(["eval", "qa", "--retriever", "tfidf", "--checkpoint", path], capsys)
    assert code == 2 and "--retriever" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(["pretrain", "ict", "--pp", "2", "--nproc", "2"], capsys)
    assert code == 2 and "pipeline" in err


def test_finetune_e2e_qa_emdr2_writes_versions_parts_and_results(files, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    dpr = str(tmp_path / "dpr")
    code, _, err = _run(["finetune", "dpr", "--data", files["dpr"], "--tokenizer", files["tok"], "--steps", "1",
                         "--out", dpr, *TINY], capsys)
    assert code == 0, err
    out = str(tmp_path / "e2e")
    code, _, err = _run(["finetune", "e2e-qa", "--retriever", dpr, "--method", "emdr2", "--evidence", files["ev"],
                         "--questions", files["q"], "--steps", "2", "--refresh-every", "1", "--top-k", "2",
                         "--seq-length", "24", "--reader-length", "32", "--micro-batch-size", "2",
                         "--global-batch-size", "2", "--out", out], capsys)
    assert code == 0, err
    assert "held-out before" in err and "held-out after" in err
    recs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [(r["step"], r["index_version"], r["index_weights_step"]) for r in recs] == [(1, 0, 0), (2, 1, 1)]
    m = json.load(open(os.path.join(out, "results.json")))["metrics"]
    _assert_e2e_values(out, m)
    step = os.path.join(out, "checkpoints", "step_2")
    from mwb.retrieval.loading import open_source
    from mwb.retrieval.readers.loading import load_reader
    assert open_source(os.path.join(step, "retriever")).kind == "mwb-biencoder"
    assert load_reader(os.path.join(step, "reader")).kind == "fid"


def test_e2e_qa_with_a_causal_reader_on_the_retrievers_vocabulary(files, capsys, tmp_path):
    from mwb.retrieval.readers.loading import load_reader
    from tests.helpers.checkpoints import tiny_checkpoint
    dpr = str(tmp_path / "dpr")
    code, _, err = _run(["finetune", "dpr", "--data", files["dpr"], "--tokenizer", files["tok"], "--steps", "1",
                         "--out", dpr, *TINY], capsys)
    assert code == 0, err
    shape = {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "num_query_groups": 1}
    untied = tiny_checkpoint(str(tmp_path / "untied"), "llama-tiny", seq=64, tokenizer=files["tok"], **shape)
    code, _, err = _run(["finetune", "e2e-qa", "--retriever", dpr, "--reader", untied, "--evidence", files["ev"],
                         "--questions", files["q"], "--out", str(tmp_path / "x")], capsys)
    assert code in (1, 2) and "one tying rule" in err and len(err.strip().splitlines()) == 1
    gpt = tiny_checkpoint(str(tmp_path / "gpt"), "llama-tiny", seq=64, tokenizer=files["tok"], tie_embeddings=True,
                          **shape)
    out = str(tmp_path / "e2e")
    code, _, err = _run(["finetune", "e2e-qa", "--retriever", dpr, "--reader", gpt, "--method", "emdr2",
                         "--evidence", files["ev"], "--questions", files["q"], "--steps", "2", "--refresh-every", "1",
                         "--top-k", "2", "--seq-length", "24", "--reader-length", "32", "--micro-batch-size", "2",
                         "--global-batch-size", "2", "--out", out], capsys)
    assert code == 0, err
    assert "causal reader" in err
    m = json.load(open(os.path.join(out, "results.json")))["metrics"]
    _assert_e2e_values(out, m)
    assert load_reader(os.path.join(out, "checkpoints", "step_2", "reader")).kind == "causal"


def test_e2e_qa_bad_layout_is_one_line(files, capsys, tmp_path):
    code, _, err = _run(["finetune", "e2e-qa", "--retriever", "no/such/dir", "--out", str(tmp_path / "x")], capsys)
    assert code in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(["finetune", "e2e-qa", "--indexer-ranks", "1", "--refresh-every", "0",
                         "--out", str(tmp_path / "y")], capsys)
    assert code == 2 and "--indexer-ranks" in err
