"""A joint QA run against its own start: the retriever keeps the scoring it was trained with.

The start is a tiny ICT retriever trained here from scratch (cosine / 0.05, mean pooling, 20-token passages),
on passages longer than that, and the joint runs pass ``--seq-length 48``. At ``--lr 0`` every method
(individual, emdr2, pipeline) must save a retriever with the start's settings that ranks and scores every
question exactly as the start does, and report the start's held-out top-k before and after. Inside the
loss, the retriever logits must be the start's own scores of the same passages.
"""
import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("faiss")

from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli

from .e2e_helpers import ToyReader
from .retrieval_helpers import make_tokenizer, passages, question_for, sentence_text

START_LENGTH, RUN_LENGTH = 20, 48  # passages (~36 tokens) are cut at 20 by the start; 48 would keep them whole
SHAPE = {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "max_position_embeddings": 64}
TINY = [a for k, v in SHAPE.items() for a in ("--set", f"model.{k}={v}")] + ["--set", "model.dropout=0.0"]
METHODS = ("individual", "emdr2", "pipeline")


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e-start")
    tok = make_tokenizer(str(d / "tok"))
    texts = passages(24, seed=8, length=30)
    rng = np.random.default_rng(3)
    with open(d / "ev.tsv", "w") as f:
        f.write("id\ttext\ttitle\n" + "".join(f"p{i}\t{sentence_text(t)}\tw{i}\n" for i, t in enumerate(texts)))
    with open(d / "q.tsv", "w") as f:
        f.writelines(f"{question_for(t, rng)}\t{json.dumps([t.split()[0]])}\n" for t in texts)
    ict = str(d / "ict")
    mp = pytest.MonkeyPatch()
    mp.setenv("MWB_CACHE", str(d / "cache"))
    code, _, err = _cli(["pretrain", "ict", "--evidence", str(d / "ev.tsv"), "--tokenizer", tok, "--steps", "4",
                         "--seq-length", str(START_LENGTH), "--query-length", "8", "--micro-batch-size", "8",
                         "--global-batch-size", "8", "--eval-interval", "0", "--out", ict, *TINY])
    mp.undo()
    assert code == 0, err
    reader = tiny_checkpoint(str(d / "reader"), "bert-tiny", seq=64, tokenizer=tok, dropout=0.0, **SHAPE)
    return {"dir": d, "tok": tok, "ev": str(d / "ev.tsv"), "q": str(d / "q.tsv"), "ict": ict, "reader": reader}


def _cli(argv):
    import contextlib
    import io

    from mwb.cli.main import main

    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
    return code, "", err.getvalue()


def _settings(path):
    from mwb.retrieval.loading import open_source
    return open_source(path).rcfg


def _dense(path, evidence):
    from mwb.retrieval.qa_system import build_system
    opts = {"evidence": evidence, "match": "string", "query_length": None, "context_length": None,
            "batch_size": 8, "index": "flat", "nprobe": 16}
    return build_system(opts, ["dpr"], path, None, None, 0, 1, None)[1]


def test_start_is_a_cosine_retriever_on_short_passages(start):
    rcfg = _settings(start["ict"])
    assert rcfg.normalize and rcfg.score_scale == "temperature" and rcfg.temperature == 0.05
    assert rcfg.context_length == START_LENGTH


@pytest.mark.parametrize("method", METHODS)
def test_lr0_joint_run_evaluates_exactly_as_its_start(start, method, tmp_path, monkeypatch, capsys):
    from mwb.retrieval.e2e.train import answerable, split_questions
    from mwb.retrieval.loading import open_source
    from mwb.retrieval.matching import first_hit, top_k_accuracy
    from mwb.retrieval.inputs import read_evidence, read_questions

    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    out = str(tmp_path / method)
    reader = [] if method == "emdr2" else ["--reader", start["reader"]]  # emdr2: the default tiny FiD reader
    code, _, err = run_cli(["finetune", "e2e-qa", "--retriever", start["ict"], *reader, "--method", method,
                            "--evidence", start["ev"], "--questions", start["q"], "--steps", "2", "--lr", "0",
                            "--set", "optim.min_lr=0", "--refresh-every", "1", "--top-k", "3",
                            "--seq-length", str(RUN_LENGTH), "--reader-length", "48", "--micro-batch-size", "2",
                            "--global-batch-size", "2", "--eval-questions", "0", "--out", out], capsys)
    assert code == 0, err
    assert f"keeps the {START_LENGTH}-token passages" in err and "the starting retriever's own" in err
    saved = os.path.join(out, "checkpoints", "step_2", "retriever")
    assert _settings(saved) == _settings(start["ict"])  # every setting: normalize, temperature, lengths, pooling
    a, b = open_source(start["ict"]), open_source(saved)
    names = _names(b)
    assert names and max(float((a.tensor("query", n) - b.tensor("query", n)).abs().max()) for n in names) < 1e-7

    records = read_questions(start["q"])
    questions = [r["question"] for r in records]
    before, after = _dense(start["ict"], start["ev"]), _dense(saved, start["ev"])
    s0, r0 = before.retrievers["dpr"].search(questions, 10)
    s1, r1 = after.retrievers["dpr"].search(questions, 10)
    np.testing.assert_array_equal(r1, r0)                    # every question ranks the same passages
    np.testing.assert_allclose(s1, s0, rtol=0, atol=1e-5)    # with the same scores

    # the run's own held-out top-k, before and after, is the start's
    ev = read_evidence(start["ev"])
    held = split_questions(answerable(records, ev))[1]
    _, rows = before.retrievers["dpr"].search([q["question"] for q in held], 20)
    want = top_k_accuracy([first_hit(q["answers"], [ev.texts[r] for r in row]) for q, row in zip(held, rows)],
                          (1, 5, 20))
    m = json.load(open(os.path.join(out, "results.json")))["metrics"]
    for k, v in want.items():
        assert m[f"top{k}"] == pytest.approx(v, abs=1e-9) and m[f"top{k}_before"] == pytest.approx(v, abs=1e-9)
    assert 0 < want[5] < 1 or want[1] < want[20]  # the numbers say something (not all 0 or all 1)


def _names(source):
    """Parameter names of a bi-encoder source (BERT naming, one tower)."""
    from mwb.core.checkpoint import Checkpoint
    from mwb.core.checkpoint.consolidate import resolve
    prefix = "query."
    return [n[len(prefix):] for n in Checkpoint(resolve(source.path)).tensors if n.startswith(prefix)]


@pytest.fixture()
def joint(start, tmp_path, monkeypatch):
    """A joint trainer at lr 0 as ``e2e-qa`` builds it from the start (ToyReader for speed), its index and a
    batch; ``seen`` collects the logits handed to the losses and the rows retrieved."""
    from mwb.core.config import RunConfig, update
    from mwb.core.presets import apply_preset
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.training.batches import collate
    from mwb.retrieval.biencoder import RetrievalConfig
    from mwb.retrieval.e2e import joint as joint_mod
    from mwb.retrieval.e2e.joint import QuestionSet
    from mwb.retrieval.e2e.refresh import RefreshConfig
    from mwb.retrieval.e2e.train import DEFAULTS, initialise_retriever, joint_trainer, make_refresh, plan_run
    from mwb.retrieval.loading import open_source
    from mwb.retrieval.inputs import read_evidence, read_questions

    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))

    def make(method):
        base = update(apply_preset(RunConfig(), "bert-tiny"), {**DEFAULTS, "train": {**DEFAULTS["train"],
                                                                                      "seq_length": RUN_LENGTH}})
        cfg, plan = plan_run(base, start["ict"], start["reader"], method, 3, start["ev"], start["q"],
                             RefreshConfig(), reader_length=48, eval_questions=0)
        assert RetrievalConfig.from_dict(plan.rcfg) == _settings(start["ict"])
        assert cfg.train.seq_length == START_LENGTH
        cfg = update(cfg, {"train": {"micro_batch_size": 4, "global_batch_size": 4, "steps": 1},
                           "optim": {"lr": 0.0, "min_lr": 0.0, "warmup_steps": 0}})
        tok = load_tokenizer(plan.tokenizer)
        ev, records = read_evidence(plan.evidence), read_questions(plan.questions)
        rcfg = RetrievalConfig.from_dict(plan.rcfg)
        trainer = joint_trainer(cfg, rcfg, method, 3, lambda s, d, t: ToyReader(tok, cfg.model.vocab_size),
                                records, ev, tok, 1)
        initialise_retriever(trainer, open_source(plan.retriever))
        trainer.spec.index = make_refresh(RefreshConfig(), trainer, tok, ev).start(trainer.model.retriever)
        seen = {}
        for name in ("individual_topk_loss", "emdr2_retriever_loss"):
            orig = getattr(joint_mod, name)
            monkeypatch.setattr(joint_mod, name, _recorder(orig, seen))
        retrieve = trainer.spec.retrieve

        def rec(*a):
            q, rows = retrieve(*a)
            seen["rows"] = rows
            return q, rows
        trainer.spec.retrieve = rec
        batch = collate([QuestionSet(records, tok, rcfg.query_length, 0)[i] for i in range(8)])
        return trainer, batch, records, tok, ev, seen
    return make


def _recorder(fn, seen):
    def wrapped(logits, *a, **k):
        seen["logits"] = logits
        return fn(logits, *a, **k)
    return wrapped


@pytest.mark.parametrize("method", METHODS)
def test_joint_losses_score_with_the_start_retrievers_own_scoring(joint, start, method):
    from mwb.retrieval.biencoder import score_divisor
    from mwb.retrieval.index import DenseIndex, embed_passages
    from mwb.retrieval.loading import load_biencoder
    from mwb.retrieval.inputs import pad_batch, query_ids, specials

    trainer, batch, records, tok, ev, seen = joint(method)
    trainer.model.train()
    loss, n = trainer.spec.forward(trainer.model, batch)
    retriever = trainer.model.retriever
    live = [p for p in retriever.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, live, allow_unused=True) if live else []

    # the start, independently: its settings, its index, its similarity
    source, model = load_biencoder(start["ict"])
    rcfg = source.rcfg
    ids = query_ids(tok, [records[int(i)]["question"] for i in batch["qid"]], rcfg.query_length)
    t, m = pad_batch(ids, specials(tok)[2])
    with torch.no_grad():
        q = model.embed_queries(torch.as_tensor(t), torch.as_tensor(m)).float()
    emb = embed_passages(model, tok, ev.titles, ev.texts, rcfg, 8, progress=False)
    _, rows = DenseIndex.build(emb).search(q.numpy(), 3)
    expected = np.einsum("bh,bkh->bk", q.numpy(), emb[rows]) / score_divisor(rcfg, q.size(-1))

    np.testing.assert_array_equal(seen["rows"], rows)
    np.testing.assert_allclose(seen["logits"].detach().numpy(), expected, rtol=0, atol=2e-4)
    assert float(np.abs(expected).max()) > 5  # cosine / 0.05: not q·d/√h of raw embeddings (|cos| ≤ 1)
    if method == "pipeline":  # fixed: frozen, out of the optimizer, no graph into it
        assert not seen["logits"].requires_grad and not live
        frozen = {id(p) for p in retriever.parameters()}
        assert not any(id(pc.param) in frozen for pc in trainer.optimizer.pieces)
    else:  # the loss trains the retriever through these logits
        assert seen["logits"].requires_grad and any(g is not None and g.abs().sum() > 0 for g in grads)


def test_plain_bert_start_takes_emdr2_scoring_and_says_so(start, tmp_path, capsys):
    from mwb.core.config import ConfigError, RunConfig, update
    from mwb.core.presets import apply_preset
    from mwb.retrieval.e2e.refresh import RefreshConfig
    from mwb.retrieval.e2e.scoring import joint_scoring
    from mwb.retrieval.e2e.train import DEFAULTS, plan_run
    from mwb.retrieval.loading import open_source

    bert = open_source(start["reader"])  # a plain BERT: no retrieval settings of its own
    s = joint_scoring(bert)
    assert s.rcfg == bert.rcfg.replace(score_scale="sqrt") and "plain BERT" in s.change
    own = joint_scoring(open_source(start["ict"]))
    assert own.rcfg == _settings(start["ict"]) and own.change == ""

    base = update(apply_preset(RunConfig(), "bert-tiny"), DEFAULTS)
    capsys.readouterr()
    _, plan = plan_run(base, start["reader"], start["reader"], "pipeline", 3, start["ev"], start["q"],
                       RefreshConfig(every=8), reader_length=48)
    err = capsys.readouterr().err
    assert "plain BERT" in err and "embedded once" in err and len(err.strip().splitlines()) == 2
    assert plan.rcfg["score_scale"] == "sqrt" and plan.refresh["every"] == 0 and "EMDR2" in plan.scoring
    with pytest.raises(ConfigError, match="indexer-ranks"):
        plan_run(base, start["ict"], start["reader"], "pipeline", 3, start["ev"], start["q"],
                 RefreshConfig(every=2, indexer_ranks=1))
