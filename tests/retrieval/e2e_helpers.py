"""Pieces of the joint-training tests: a tiny test-double reader, a synthetic QA set over the synthetic
evidence of :mod:`retrieval_helpers`, and the per-rank function of the refresh / layout comparisons."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .retrieval_helpers import MODEL, RCFG, passages, question_for

ANSWER_TOKENS = 2


class ToyReader(nn.Module):
    """A bag-of-words reader with the reader interface: log p(answer word t | question, passage) from the
    mean word embedding of question + title + passage (its FiD-style ``loss`` reads the mean over all K
    passages). Deterministic initialisation; replicated (not sharded) under tensor parallelism."""

    def __init__(self, tok, vocab: int, dim: int = 16, seed: int = 11) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.tok, self.vocab = tok, vocab
        self.embed = nn.Parameter(torch.randn(vocab, dim, generator=g) * 0.5)
        self.out = nn.Parameter(torch.randn(dim, vocab, generator=g) * 0.5)

    def _rep(self, question: str, doc: dict) -> torch.Tensor:
        ids = self.tok.encode(f"{question} {doc['title']} {doc['text']}")
        return self.embed[torch.tensor(ids, dtype=torch.long)].mean(0)

    def _targets(self, answers):
        rows = [self.tok.encode(" ".join(a[:1]))[:ANSWER_TOKENS] for a in answers]
        t = torch.zeros(len(rows), ANSWER_TOKENS, dtype=torch.long)
        m = torch.zeros(len(rows), ANSWER_TOKENS)
        for i, r in enumerate(rows):
            t[i, :len(r)], m[i, :len(r)] = torch.tensor(r, dtype=torch.long), 1
        return t, m

    def _logp(self, questions, docs) -> torch.Tensor:  # [B, K, V]
        reps = torch.stack([torch.stack([self._rep(q, d) for d in ds]) for q, ds in zip(questions, docs)])
        return F.log_softmax(reps @ self.out, -1)

    def doc_logprobs(self, questions, docs, answers):
        t, m = self._targets(answers)
        lp = self._logp(questions, docs)
        return lp.gather(-1, t[:, None, :].expand(-1, lp.size(1), -1)), m

    def loss(self, questions, docs, answers):
        t, m = self._targets(answers)
        fused = torch.logsumexp(self._logp(questions, docs), 1) - np.log(len(docs[0]))  # mean p over docs
        nll = -(fused.gather(-1, t) * m).sum(-1)
        return nll.mean()

    def predict(self, questions, docs):
        lp = self._logp(questions, docs)[:, 0]
        return [self.tok.decode([int(i)]) for i in lp.argmax(-1)]


def qa_records(n: int, seed: int) -> tuple[list[str], list[dict]]:
    """Passages and questions whose answer is the passage's first word (found in it by DPR's rule)."""
    rng = np.random.default_rng(seed + 1)
    ps = passages(n, seed)
    return ps, [{"question": question_for(p, rng), "answers": [p.split()[0]]} for p in ps]


def write_qa_evidence(path: str, n: int = 24, seed: int = 4):
    ps, qs = qa_records(n, seed)
    with open(path, "w") as f:
        f.write("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tw{i}\n" for i, t in enumerate(ps)))
    return path, qs


def config(layout: dict, steps: int, gbs: int = 4, mbs: int = 2):
    from mwb.core.config import RunConfig, update

    return update(RunConfig(), {"model": MODEL, "parallel": layout,
                                "train": {"steps": steps, "micro_batch_size": mbs, "global_batch_size": gbs,
                                          "seq_length": RCFG["context_length"], "seed": 3},
                                "optim": {"lr": 1e-3, "warmup_steps": 0}})


def joint_run(layout: dict, world: int, tok_path: str, evidence_path: str, questions: list, method: str,
              refresh: dict, steps: int = 4, keep=None, roles=None) -> dict:
    """Per-step losses, index versions and weights steps of a tiny joint run in ``layout`` on ``world``
    training ranks (``refresh['indexer_ranks']`` > 0: the job's last ranks index instead)."""
    from mwb.core.tokenizers import load_tokenizer
    from mwb.retrieval.biencoder import RetrievalConfig
    from mwb.retrieval.e2e.refresh import RefreshConfig, embed_sharded, indexer_loop, split_roles
    from mwb.retrieval.e2e.train import joint_trainer, make_refresh, run_joint
    from mwb.retrieval.inputs import read_evidence

    tok = load_tokenizer(tok_path)
    ev = read_evidence(evidence_path)
    rcfg = RetrievalConfig(query_length=RCFG["query_length"], context_length=RCFG["context_length"],
                           score_scale=RCFG["score_scale"])  # EMDR2's q·d/√h on raw embeddings
    rc = RefreshConfig(**refresh)
    cfg = config(layout, steps)
    if rc.indexer_ranks and roles is None:
        roles = split_roles(rc.indexer_ranks, 60)
    if roles is not None and roles.indexer:
        from mwb.core.parallel.state import single_process_state
        from mwb.retrieval.biencoder import build_biencoder
        enc = build_biencoder(cfg.model, rcfg, single_process_state(), MODEL["vocab_size"], cfg.train.seed)
        return {"indexer_refreshes": indexer_loop(roles, enc, tok, ev, rcfg, batch_size=rc.batch_size)}
    trainer = joint_trainer(cfg, rcfg, method, 3, lambda state, device, dtype: ToyReader(tok, MODEL["vocab_size"]),
                            questions, ev, tok, roles.trainers if roles else world)
    snapshots = {}

    def cb(tr, res, stop):  # embeddings of the evidence by the weights right after each step in ``keep``
        if keep and res.step in keep:
            snapshots[res.step] = embed_sharded(tr.model.retriever, tok, ev, rcfg, 0, 1, None, batch_size=8)
    hist = run_joint(trainer, make_refresh(rc, trainer, tok, ev, roles), cb)
    index = trainer.spec.index
    return {"loss": [h.loss for h in hist], "grad_norm": [h.grad_norm for h in hist],
            "version": [h.extra["index_version"] for h in hist],
            "weights_step": [h.extra["index_weights_step"] for h in hist],
            "retriever_loss": [h.extra["retriever_loss"] for h in hist],
            "final_index": (index.version, index.weights_step, np.array(index.embeddings)),
            "snapshots": snapshots}


def layouts_worker(rank: int, world: int, tok_path: str, evidence: str, questions: list) -> dict:
    """On 2 ranks: DP2 and TP2 joint runs (both methods), then 1 trainer + 1 indexer (async, forced wait)."""
    out = {}
    for name, layout in (("dp2", {"tp": 1}), ("tp2", {"tp": 2})):
        for method in ("emdr2", "individual"):
            out[f"{name}-{method}"] = joint_run(layout, world, tok_path, evidence, questions, method,
                                                {"every": 2}, steps=4)
    from mwb.retrieval.e2e.refresh import split_roles
    roles = split_roles(1, 60)
    out["async"] = joint_run({"tp": 1}, 1, tok_path, evidence, questions, "emdr2",
                             {"every": 2, "indexer_ranks": 1, "wait": True}, steps=4, roles=roles)
    out["async-overlap"] = joint_run({"tp": 1}, 1, tok_path, evidence, questions, "emdr2",
                                     {"every": 2, "indexer_ranks": 1}, steps=6, roles=roles)
    return out
