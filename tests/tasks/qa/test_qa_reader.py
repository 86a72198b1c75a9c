"""``mwb finetune qa-reader`` and ``mwb eval qa --reader`` end to end on an evidence TSV and a question file
written here (DPR's formats), with tiny models: the run trains and scores, and ``eval qa``'s EM/F1 equal the
SQuAD scores of the reader's own predictions on the BM25 passages (extractive BERT, FiD T5, causal Llama);
a joint run's layout resolves."""
import json
import os

import pytest

from mwb.core.config import ConfigError
from mwb.evaluation.metrics import squad_scores
from mwb.evaluation.predictions import read_predictions
from mwb.retrieval.bm25 import BM25Retriever
from mwb.retrieval.readers.base import ReaderConfig
from mwb.retrieval.readers.loading import joint_run_parts, load_reader
from mwb.retrieval.inputs import read_evidence, read_questions
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.records import assert_run_dir

FACTS = [("Zorbland", "The capital of Zorbland is Quillport, a harbour city."),
         ("Mount Vekra", "Mount Vekra was first climbed by Ada Lindqvist in the spring."),
         ("Blue heron river", "The Blue Heron river flows into Lake Tamsin near the border."),
         ("Orvik bridge", "The Orvik bridge was designed by Paulo Brenner for the railway."),
         ("Pellan fruit", "The pellan fruit tastes of pepper and honey when ripe."),
         ("Castell tower", "Castell tower stands beside the old market of Drenford."),
         ("Harrow lighthouse", "Harrow lighthouse is painted with red stripes by the keepers."),
         ("Lake Tamsin", "Lake Tamsin is home to a rare silver trout.")]
QUESTIONS = [("what is the capital of zorbland", ["Quillport"]), ("who first climbed mount vekra", ["Ada Lindqvist"]),
             ("where does the blue heron river flow", ["Lake Tamsin"]), ("who designed the orvik bridge",
                                                                       ["Paulo Brenner"]),
             ("what does pellan fruit taste of", ["pepper and honey"]), ("what stands beside castell tower",
                                                                          ["the old market of Drenford"]),
             ("what is harrow lighthouse painted with", ["red stripes"]), ("what lives in lake tamsin",
                                                                           ["a rare silver trout"]),
             ("who climbed vekra first", ["Ada Lindqvist"]), ("what city is zorbland's capital", ["Quillport"])]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("odqa")
    ev = d / "evidence.tsv"
    ev.write_text("id\ttext\ttitle\n" + "".join(f"p{i}\t{text}\t{title}\n" for i, (title, text) in enumerate(FACTS)))
    qs = d / "questions.tsv"
    qs.write_text("".join(f"{q}\t{json.dumps(a)}\n" for q, a in QUESTIONS))
    return d, str(ev), str(qs)


@pytest.mark.parametrize("kind", ["extractive", "fid", "causal"])
def test_finetune_reader_then_eval_qa_with_reader(files, capsys, kind):
    d, ev, qs = files
    if kind == "extractive":
        base = tiny_checkpoint(str(d / kind), "bert-tiny", seq=64, num_layers=1, hidden_size=32,
                               num_attention_heads=2, max_position_embeddings=64)
    elif kind == "causal":
        base = tiny_checkpoint(str(d / kind), "llama-tiny", seq=64, num_layers=1, hidden_size=32,
                               num_attention_heads=2, num_query_groups=1)
    else:
        base = tiny_checkpoint(str(d / kind), "t5-tiny", seq=64, num_layers=1, num_decoder_layers=1, hidden_size=32,
                               num_attention_heads=2)
    run = str(d / f"reader-run-{kind}")
    code, _, err = run_cli(["finetune", "qa-reader", "--reader", kind, "--checkpoint", base, "--data", qs,
                            "--evidence", ev,
                            "--top-k", "2", "--reader-length", "48", "--epochs", "2", "--micro-batch-size", "4",
                            "--global-batch-size", "4", "--lr", "3e-3", "--out", run], capsys)
    assert code in (0, None), err
    res = json.load(open(os.path.join(run, "results.json")))
    assert res["task"] == "qa-reader" and 0 <= res["metrics"]["exact_match"] <= 100
    assert res["metrics"]["answer_in_passages"] == 100.0 and res["metrics"]["count"] == 2  # two dev questions
    assert assert_run_dir(run, at_least=3) == ["exact_match", "f1", "answer_in_passages"]  # the best epoch's dev
    assert [r["id"] for r in read_predictions(run)] == ["q4", "q9"]  # dev: every fifth line of the file

    out = str(d / f"eval-{kind}")
    code, _, err = run_cli(["eval", "qa", "--retriever", "bm25", "--reader", run, "--evidence", ev, "--questions", qs,
                            "--top-k", "1,2", "--reader-k", "2", "--reader-length", "48", "--out", out], capsys)
    assert code in (0, None), err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    # the same reader, passages and answers, computed here without the harness
    reader = load_reader(res["best_checkpoint"], "cpu", ReaderConfig(seq_length=48, max_answer_tokens=16))
    assert reader.kind == kind
    evidence, questions = read_evidence(ev), read_questions(qs)
    rows = BM25Retriever(evidence).search([q["question"] for q in questions], 2)[1]
    docs = [[{"id": evidence.ids[r], "title": evidence.titles[r], "text": evidence.texts[r]} for r in row]
            for row in rows]
    preds = reader.predict([q["question"] for q in questions], docs)
    want = squad_scores(preds, [q["answers"] for q in questions])
    assert metrics["bm25_exact_match"] == pytest.approx(want["exact_match"])
    assert metrics["bm25_f1"] == pytest.approx(want["f1"])
    assert set(metrics) >= {"bm25_top1", "bm25_top2", "num_questions"} and metrics["num_questions"] == 10
    assert assert_run_dir(out, at_least=4) == ["bm25_top1", "bm25_top2", "bm25_exact_match", "bm25_f1"]
    assert [r["prediction"]["bm25"]["answer"] for r in read_predictions(out)] == preds
    code, _, err = run_cli(["eval", "qa-reader", "--checkpoint", run, "--data", qs, "--evidence", ev, "--top-k", "2",
                            "--reader-length", "48", "--out", str(d / f"eval-reader-{kind}")], capsys)
    assert code in (0, None), err  # no --reader: the checkpoint's kind, and results.json says which
    assert json.load(open(d / f"eval-reader-{kind}" / "results.json"))["task_options"]["reader"] == kind
    assert assert_run_dir(str(d / f"eval-reader-{kind}"), at_least=3)
    if kind != "extractive":
        return

    code, _, err = run_cli(["eval", "qa", "--retriever", "bm25", "--reader", str(d / "missing"), "--evidence", ev,
                            "--questions", qs, "--out", out], capsys)
    errors = [line for line in err.splitlines() if "error" in line]
    assert code in (1, 2) and len(errors) == 1 and errors[0].startswith("mwb: error: checkpoint not found")


def test_joint_run_layout(tmp_path):
    step = tmp_path / "run" / "checkpoints" / "step_7"
    for part in ("retriever", "reader"):
        (step / part).mkdir(parents=True)
    assert joint_run_parts(str(tmp_path / "run")) is None  # no best/latest pointer
    (tmp_path / "run" / "checkpoints" / "best").write_text("step_7\n")
    assert joint_run_parts(str(tmp_path / "run")) == (str(step / "retriever"), str(step / "reader"))
    assert joint_run_parts(str(step)) == (str(step / "retriever"), str(step / "reader"))


def test_answerable_only_drops_training_questions_whose_passages_lack_an_answer(files):
    from mwb.tasks.qa.reader import QAReader
    d, ev, qs = files
    extra = d / "with_unanswerable.tsv"
    extra.write_text(open(qs).read() + f"what colour is the orvik bridge\t{json.dumps(['ultramarine'])}\n")
    kept = {}
    for flag in (False, True):
        task = QAReader(evidence=ev, top_k=2, max_questions=0, answerable_only=flag)
        kept[flag] = {split: [e["question"] for e in task.read(str(extra), split)] for split in ("train", "all")}
    assert "what colour is the orvik bridge" in kept[False]["train"]
    assert kept[True]["train"] == [q for q in kept[False]["train"] if q != "what colour is the orvik bridge"]
    assert kept[True]["all"] == kept[False]["all"]  # evaluation keeps every question


def test_mss_questions_join_the_training_split_only(tmp_path, capsys):
    from mwb.tasks.qa.reader import QAReader
    ev = tmp_path / "evidence.tsv"
    ev.write_text("id\ttext\ttitle\n" + "".join(f"p{i}\t{t}\tT{i}\n" for i, t in enumerate([
        "Isaac Newton was born in 1642 near the town of Grantham in England.",
        "The Bank of England was founded in 1694 to lend money to the King.",
        "Marie Curie won the Nobel Prize in Physics in the year 1903."])))
    qs = tmp_path / "q.tsv"
    qs.write_text("".join(f"question {i} about grantham\t{json.dumps(['x'])}\n" for i in range(5)))
    read = {n: {split: QAReader(evidence=str(ev), top_k=1, max_questions=0, mss_questions=n).read(str(qs), split)
                for split in ("train", "dev")} for n in (0, 2)}
    assert read[2]["dev"] == read[0]["dev"] and read[2]["train"][:4] == read[0]["train"]
    made = read[2]["train"][4:]
    assert len(made) == 2 and all(e["answers"][0] in e["docs"][0]["text"] for e in made)  # BM25 finds the source
    assert "evidence gives" not in capsys.readouterr().err
    assert len(QAReader(evidence=str(ev), top_k=1, max_questions=0, mss_questions=9).read(str(qs), "train")) == 7
    assert "--mss-questions 9: the evidence gives 3" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--mss-questions"):
        QAReader(mss_questions=-1)


def test_questions_mss_reads_e2e_qa_training_questions_only_and_trains(tmp_path, capsys):
    """``--questions mss``: exactly the questions ``e2e-qa --questions mss`` trains on (its answerable MSS
    questions minus every 4th), none it holds out, split four in five / every fifth; ``--data`` beside it is
    refused; a tiny extractive reader trains on them end to end."""
    from mwb.retrieval.e2e.train import answerable, split_questions
    from mwb.retrieval.mss_question_file import evidence_questions
    from mwb.tasks.qa.reader import QAReader
    texts = [f"{name} was born in {1700 + 7 * i} in the town of {town}." for i, (name, town) in enumerate(
        [("Ada Lindqvist", "Drenford"), ("Paulo Brenner", "Quillport"), ("Isaac Newton", "Grantham"),
         ("Marie Curie", "Warsaw"), ("Tamsin Orvik", "Harrow"), ("Jonas Vekra", "Castell"),
         ("Elena Pellan", "Zorbland"), ("Otto Heron", "Tamsin"), ("Greta Stripe", "Marlow")])]
    ev = tmp_path / "evidence.tsv"
    ev.write_text("id\ttext\ttitle\n" + "".join(f"p{i}\t{t}\tT{i}\n" for i, t in enumerate(texts)))
    train, held = split_questions(answerable(evidence_questions(str(ev)), read_evidence(str(ev))))
    assert len(train) >= 6 and len(held) >= 2
    task = QAReader(evidence=str(ev), top_k=1, max_questions=0, questions="mss")
    path = task.data_path(None)
    read = {s: [e["question"] for e in task.read(path, s)] for s in ("train", "dev")}
    assert read["train"] + read["dev"] != [] and sorted(read["train"] + read["dev"]) == sorted(
        q["question"] for q in train)
    assert read["dev"] == [q["question"] for i, q in enumerate(train) if i % 5 == 4]
    with pytest.raises(ConfigError, match="drop --data"):
        task.data_path(str(ev))
    with pytest.raises(ConfigError, match="--questions must be one of mss"):
        QAReader(questions="real")
    base = tiny_checkpoint(str(tmp_path / "bert"), "bert-tiny", seq=64, num_layers=1, hidden_size=32,
                           num_attention_heads=2, max_position_embeddings=64)
    run = str(tmp_path / "reader")
    code, _, err = run_cli(["finetune", "qa-reader", "--questions", "mss", "--evidence", str(ev), "--checkpoint", base,
                            "--max-questions", "0", "--top-k", "1", "--reader-length", "48", "--epochs", "1",
                            "--micro-batch-size", "2", "--global-batch-size", "2", "--out", run], capsys)
    assert code in (0, None), err
    assert json.load(open(os.path.join(run, "results.json")))["metrics"]["count"] == len(read["dev"])
    assert load_reader(run, "cpu", ReaderConfig(seq_length=48)).kind == "extractive"
