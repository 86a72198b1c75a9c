"""Readers (mwb/retrieval/readers): per-document answer log-probabilities against hand computations from the
models' own outputs, the K = 1 reduction, and a predict round trip after overfitting one question."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.data.bundled import tokenizer_file
from mwb.core.parallel.dims import ParallelDims
from mwb.core.parallel.state import build_state, single_process_state
from mwb.core.presets import apply_preset
from mwb.core.tokenizers import load_tokenizer
from mwb.retrieval.readers.base import NO_MATCH, Reader, ReaderConfig, answer_char_spans, doc_context
from mwb.retrieval.readers.loading import build_reader_model, fill_reader, wrap
from tests.helpers.distributed import run_ranks

QUESTIONS = ["who wrote hamlet", "where is the louvre"]
DOCS = [[{"id": "1", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare. Shakespeare wrote it."},
         {"id": "2", "title": "Tea", "text": "Tea is a drink."}],
        [{"id": "3", "title": "Louvre", "text": "The Louvre is a museum in Paris, France."},
         {"id": "4", "title": "Paris", "text": "Paris is the capital of France; paris is large."}]]
ANSWERS = [["Shakespeare", "William Shakespeare"], ["Paris"]]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tokenizer_file())


def tiny_reader(kind: str, tok, seed: int = 3, **cfg):
    preset = {"extractive": "bert-tiny", "fid": "t5-tiny", "causal": "llama-tiny"}[kind]
    run = update(apply_preset(RunConfig(), preset), {"model": {"num_layers": 1, "hidden_size": 32,
                                                               "num_attention_heads": 2, "ffn_hidden_size": 64,
                                                               "vocab_size": tok.vocab_size, "dropout": 0.0}})
    model = build_reader_model(kind, run.model, single_process_state(), tok.vocab_size, seed)
    return wrap(kind, model, tok, ReaderConfig(**{"seq_length": 48, "answer_length": 6, **cfg}))


def overfit(reader, questions, docs, answers, lr: float, steps: int) -> float:
    """Adam on the reader's own loss for ``steps`` steps; the last loss."""
    opt = torch.optim.Adam(reader.model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = reader.loss(questions, docs, answers)
        loss.backward()
        opt.step()
    return float(loss.detach())


def test_answer_char_spans_word_boundaries_and_case():
    assert answer_char_spans("Paris, paris and Parisian", ["Paris"]) == [(0, 5), (7, 12)]
    assert answer_char_spans("the US and Russia", ["us"]) == [(4, 6)]
    assert doc_context({"title": "T", "text": "x"}) == "T. x"


def test_extractive_doc_logprobs_is_hand_logsumexp_over_matching_spans(tok):
    reader = tiny_reader("extractive", tok)
    assert isinstance(reader, Reader)
    lp, mask = reader.doc_logprobs(QUESTIONS, DOCS, ANSWERS)
    assert lp.shape == (2, 2, 1) and mask.tolist() == [[1.0], [1.0]]
    batch = reader.batch(QUESTIONS, DOCS, ANSWERS)
    with torch.no_grad():
        raw = reader.model(batch["tokens"].flatten(0, 1), batch["types"].flatten(0, 1),
                           batch["padding_mask"].flatten(0, 1)).view(2, 2, 48, 2)
    total_loss = 0.0
    for b in range(2):
        joint_terms, joint_norm = [], []
        for k in range(2):
            inside = batch["char_start"][b, k] >= 0
            start = raw[b, k, :, 0][inside].double()
            end = raw[b, k, :, 1][inside].double()
            pos = torch.nonzero(inside).flatten().tolist()
            cs, ce = batch["char_start"][b, k].tolist(), batch["char_end"][b, k].tolist()
            ctx = doc_context(DOCS[b][k])
            terms = []  # every occurrence of every answer, found with str.find, mapped to tokens by hand
            for a in ANSWERS[b]:
                at = ctx.lower().find(a.lower())
                while at >= 0:
                    s = [i for i in pos if cs[i] == at]
                    e = [i for i in pos if ce[i] == at + len(a)]
                    if s and e:
                        terms.append((pos.index(s[0]), pos.index(e[-1])))  # first and last piece
                    at = ctx.lower().find(a.lower(), at + 1)
            terms = sorted(set(terms))
            if b == 0 and k == 0:
                assert len(terms) == 3  # Shakespeare twice, William Shakespeare once
            ls, le = start.log_softmax(0), end.log_softmax(0)
            want = torch.logsumexp(torch.stack([ls[s] + le[e] for s, e in terms]), 0) if terms else NO_MATCH
            assert float(lp[b, k, 0].detach()) == pytest.approx(float(want), abs=1e-5)
            joint_terms += [(start, end, s, e) for s, e in terms]
            joint_norm.append((start, end))
        zs = torch.logsumexp(torch.cat([s for s, _ in joint_norm]), 0)
        ze = torch.logsumexp(torch.cat([e for _, e in joint_norm]), 0)
        total_loss -= float(torch.logsumexp(torch.stack([s[i] + e[j] for s, e, i, j in joint_terms]), 0) - zs - ze)
    assert float(reader.loss(QUESTIONS, DOCS, ANSWERS).detach()) == pytest.approx(total_loss / 2, abs=1e-5)
    # a question no document answers: masked out of doc_logprobs and out of the loss
    lp2, mask2 = reader.doc_logprobs(QUESTIONS[:1], [DOCS[0][1:]], [["Shakespeare"]])
    assert mask2.tolist() == [[0.0]] and float(lp2.detach()) == NO_MATCH
    assert float(reader.loss(QUESTIONS[:1], [DOCS[0][1:]], [["Shakespeare"]]).detach()) == 0.0


def test_fid_doc_logprobs_are_the_decoder_on_doc_k_alone(tok):
    reader = tiny_reader("fid", tok)
    lp, mask = reader.doc_logprobs(QUESTIONS, DOCS, ANSWERS)
    batch = reader.batch(QUESTIONS, DOCS, ANSWERS)
    T = int(mask[0].sum())
    assert mask[0, :T].tolist() == [1.0] * T and T == len(tok.encode("Shakespeare")) + 1
    for b in range(2):
        for k in range(2):
            with torch.no_grad():
                logits = reader.model(batch["enc_tokens"][b, k][None], batch["dec_tokens"][b][None],
                                      enc_padding_mask=batch["enc_mask"][b, k][None])[0]
            n = int(mask[b].sum())
            want = logits[:n, :tok.vocab_size].double().log_softmax(-1).gather(1, batch["labels"][b, :n, None])[:, 0]
            assert torch.allclose(lp[b, k, :n].double(), want, atol=1e-5)
            assert float(lp[b, k, n:].abs().sum().detach()) == 0.0
    # with one document, the fused reader loss is the per-document token cross-entropy
    one = [[d[0]] for d in DOCS]
    lp1, mask1 = reader.doc_logprobs(QUESTIONS, one, ANSWERS)
    want = -(lp1[:, 0] * mask1).sum() / mask1.sum()
    assert float(reader.loss(QUESTIONS, one, ANSWERS).detach()) == pytest.approx(float(want.detach()), abs=1e-5)


def test_extractive_predict_round_trip_after_overfitting(tok):
    torch.manual_seed(0)
    reader = tiny_reader("extractive", tok)
    q, d, a = QUESTIONS[:1], DOCS[:1], [["William Shakespeare"]]
    before = reader.predict(q, d)[0]
    loss = overfit(reader, q, d, a, lr=3e-3, steps=40)
    assert math.isfinite(loss) and loss < 0.5
    assert before != "William Shakespeare" and reader.predict(q, d)[0] == "William Shakespeare"


def test_fid_predict_is_greedy_over_all_documents(tok):
    """Each predicted token is the argmax of the decoder over the fused K encodings given the prefix
    (checked by re-running the decoder without a cache on the predicted text)."""
    reader = tiny_reader("fid", tok, seed=5)
    batch = reader.batch(QUESTIONS, DOCS)
    ids = reader.greedy(batch)
    texts = reader.predict(QUESTIONS, DOCS)
    assert texts == [tok.decode(r).strip() for r in ids]
    with torch.no_grad():
        enc, mask = reader.encode(batch, fuse=True)
        assert enc.shape[:2] == (2, 2 * 48)
        for b, row in enumerate(ids):
            dec = torch.tensor([[reader.start] + row])
            logits = reader.model.decoder_logits(dec, enc[b:b + 1], mask[b:b + 1])[0, :, :tok.vocab_size]
            picked = logits.argmax(-1).tolist()
            assert picked[:len(row)] == row
            assert len(row) == reader.cfg.answer_length or picked[len(row)] == reader.end


def _causal_target_logprobs(reader, question, docs, answer):
    """log p(target tokens) from the model on the unpadded prompt + target, positions from 0."""
    prompt, target = reader.prompt_ids(question, docs), reader.target_ids([answer])
    with torch.no_grad():
        logits = reader.model(torch.tensor([prompt + target]))[0, :, :reader.tokenizer.vocab_size]
    lp = logits.double().log_softmax(-1)
    return torch.stack([lp[len(prompt) - 1 + t, tok_] for t, tok_ in enumerate(target)])


def test_causal_doc_logprobs_and_loss_are_the_unpadded_model(tok):
    """Rows of different lengths are left-padded in one batch; every score equals the model on the row alone,
    and only the answer tokens (+ the newline that ends them) are scored."""
    reader = tiny_reader("causal", tok, seq_length=40)
    lp, mask = reader.doc_logprobs(QUESTIONS, DOCS, ANSWERS)
    for b in range(2):
        n = len(reader.target_ids(ANSWERS[b]))
        assert n == len(tok.encode(" " + ANSWERS[b][0])) + len(reader.end) and int(mask[b].sum()) == n
        on = mask[b].bool()
        for k in range(2):
            want = _causal_target_logprobs(reader, QUESTIONS[b], [DOCS[b][k]], ANSWERS[b][0])
            assert torch.allclose(lp[b, k][on].double(), want, atol=1e-5)
            assert float(lp[b, k][~on].abs().sum().detach()) == 0.0
    # the reader's own loss reads all K documents: mean target-token cross-entropy over the batch
    want = [_causal_target_logprobs(reader, q, d, a[0]) for q, d, a in zip(QUESTIONS, DOCS, ANSWERS)]
    want = -torch.cat(want).mean()
    assert float(reader.loss(QUESTIONS, DOCS, ANSWERS).detach()) == pytest.approx(float(want), abs=1e-5)


def test_causal_documents_are_cut_to_fit_with_the_question(tok):
    reader = tiny_reader("causal", tok, seq_length=24)
    long = [{"title": "Long", "text": " ".join(["word"] * 200)}] * 3
    q = reader.prompt_ids(QUESTIONS[0], long[:1])
    assert len(q) == 24 and q[-len(tok.encode("Question: who wrote hamlet")) - 2:] != []
    assert len(reader.prompt_ids(QUESTIONS[0], long)) <= 3 * 24
    f = reader.featurize(QUESTIONS[0], long, ["x"])
    assert f["tokens"].shape == (3 * 24 + 7,) and f["doc_tokens"].shape == (3, 24 + 7)


def test_causal_reader_too_long_for_learned_positions_is_a_config_error(tok):
    run = update(apply_preset(RunConfig(), "gpt-tiny"), {"model": {"num_layers": 1, "hidden_size": 32,
                                                                  "num_attention_heads": 2,
                                                                  "max_position_embeddings": 32}})
    model = build_reader_model("causal", run.model, single_process_state(), tok.vocab_size, 0)
    reader = wrap("causal", model, tok, ReaderConfig(seq_length=40, answer_length=4))
    with pytest.raises(ConfigError, match="32 positions"):
        reader.loss(QUESTIONS, DOCS, ANSWERS)


def test_causal_predict_round_trip_after_overfitting(tok):
    torch.manual_seed(0)
    reader = tiny_reader("causal", tok, seed=4)
    q, d, a = QUESTIONS, DOCS, [["William Shakespeare"], ["Paris"]]
    before = reader.predict(q, d)
    loss = overfit(reader, q, d, a, lr=1e-2, steps=80)
    assert math.isfinite(loss) and loss < 0.05
    assert before != ["William Shakespeare", "Paris"] and reader.predict(q, d) == ["William Shakespeare", "Paris"]
    assert reader.model.training  # predict restores the training mode


def _causal_tp_worker(rank, world, tok):
    """The one-process tiny causal reader's weights, sharded over TP2: loss, per-document log-probs, the
    gradient norm of the loss and the greedy answers."""
    one = tiny_reader("causal", tok, seed=6, seq_length=40)
    tensors = {k: v[:tok.vocab_size] if k.endswith(("word.weight", "head.weight")) else v
               for k, v in one.model.state_dict().items()}
    mc = one.model.cfg
    model = build_reader_model("causal", mc, build_state(ParallelDims(world_size=world, tp=world)), tok.vocab_size, 6)
    fill_reader(model, "causal", tensors, tok.vocab_size, mc.tie_embeddings, "test")
    reader = wrap("causal", model, tok, one.cfg, build_state(ParallelDims(world_size=world, tp=world)))
    loss = reader.loss(QUESTIONS, DOCS, ANSWERS)
    loss.backward()
    sq = {n: (tuple(p.shape), float(p.grad.double().pow(2).sum())) for n, p in model.named_parameters()}
    lp, mask = reader.doc_logprobs(QUESTIONS, DOCS, ANSWERS)
    return {"loss": float(loss.detach()), "lp": lp.detach(), "mask": mask, "grad_sq": sq,
            "predict": reader.predict(QUESTIONS, DOCS)}


@pytest.mark.multiprocess
def test_causal_reader_tp2_equals_one_process(tok):
    one = tiny_reader("causal", tok, seed=6, seq_length=40)
    loss = one.loss(QUESTIONS, DOCS, ANSWERS)
    loss.backward()
    lp, mask = one.doc_logprobs(QUESTIONS, DOCS, ANSWERS)
    ranks = run_ranks(_causal_tp_worker, 2, tok, timeout_s=300)
    for r in ranks:
        assert r["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
        torch.testing.assert_close(r["lp"], lp.detach(), rtol=1e-5, atol=1e-5)
        assert torch.equal(r["mask"], mask) and r["predict"] == one.predict(QUESTIONS, DOCS)
    # a replicated parameter (same shape as one process's) holds the whole gradient on each rank; a split one
    # holds its shard's, so the shards' squared norms add up to the one-process one
    for name, p in one.model.named_parameters():
        if name.endswith("head.weight") and one.model.cfg.tie_embeddings:
            continue
        shards = [r["grad_sq"][name] for r in ranks]
        got = shards[0][1] if shards[0][0] == tuple(p.shape) else sum(g for _, g in shards)
        assert got == pytest.approx(float(p.grad.double().pow(2).sum()), rel=1e-4), name
