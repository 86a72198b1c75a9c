"""What joint training is judged by, on held-out questions: retriever top-k accuracy and reader exact match.

Run before the first step (the starting retriever and reader) and after the last (a fresh index from the
final context encoder): ``top{k}`` is the share of questions with an answer-bearing passage (DPR's
has-answer rule) among the k best; ``em`` is SQuAD-normalised exact match of the reader's answer from the
top-K retrieved passages; ``em_random`` the same reader given K random passages of the evidence (seeded),
the floor the issue compares against. Every rank computes the same numbers (tensor-parallel ranks embed
together; data-parallel ranks embed their slice of the evidence and gather).

:func:`heldout_eval` also returns one record per question (``OUT/predictions.jsonl``, written by the run):
its ``id`` (a hash of its position among the evaluated questions and its text: the real question sets repeat
a few questions), the question, the gold answers, the reader's answer, the rank of the first answer-bearing
passage, and each metric's 0/1 value under its ``results.json`` name, so their means are the aggregates and
runs pair question by question (``mwb compare``, ``mwb repro``); :func:`with_before` adds the ``_before``
values.
"""
from __future__ import annotations

import numpy as np
import torch

from mwb.evaluation.predictions import item_id
from mwb.evaluation.squad_metrics import squad_exact_match

from ..matching import first_hit, top_k_accuracy
from ..inputs import pad_batch, query_ids, specials
from .refresh import embed_sharded, make_index


@torch.no_grad()
def heldout_metrics(trainer, tok, evidence, questions: list[dict], ks=(1, 5, 20), batch_size: int = 8,
                    seed: int = 0, index=None) -> dict:
    """``index``: an index already embedded with the current weights (else one is embedded here)."""
    return heldout_eval(trainer, tok, evidence, questions, ks, batch_size, seed, index)[0]


@torch.no_grad()
def heldout_eval(trainer, tok, evidence, questions: list[dict], ks=(1, 5, 20), batch_size: int = 8,
                 seed: int = 0, index=None) -> tuple[dict, list[dict]]:
    """(metrics, per-question records) of :func:`heldout_metrics`; the metrics are the records' means."""
    if not questions:
        return {}, []
    model, spec, st = trainer.model, trainer.spec, trainer.state
    retriever, reader = model.retriever, model.reader
    was = model.training
    model.eval()
    if index is None:
        index = make_index(embed_sharded(retriever, tok, evidence, spec.rcfg, st.dp_rank, st.dp_size, st.dp_group,
                                         trainer.device), -1, trainer.step)
    ids = query_ids(tok, [q["question"] for q in questions], spec.rcfg.query_length)
    pad = specials(tok)[2]
    embs = []
    for s in range(0, len(ids), batch_size):
        t, m = pad_batch(ids[s:s + batch_size], pad)
        embs.append(retriever.embed_queries(torch.as_tensor(t, device=trainer.device),
                                            torch.as_tensor(m, device=trainer.device)).float().cpu())
    kmax = max(max(ks), spec.top_k)
    _, rows = index.search(torch.cat(embs).numpy(), kmax)
    hits = [first_hit(q["answers"], [evidence.texts[r] for r in row]) for q, row in zip(questions, rows)]
    records = [{"id": item_id(i, q["question"]), "question": q["question"], "gold": list(q["answers"]),
                "hit_rank": h} for i, (q, h) in enumerate(zip(questions, hits))]
    for rec, h in zip(records, hits):
        rec.update({f"top{k}": int(h is not None and h < k) for k in ks})
    out = {f"top{k}": v for k, v in top_k_accuracy(hits, ks).items()}
    rng = np.random.default_rng(seed)
    random_rows = [rng.choice(len(evidence), spec.top_k, replace=False) for _ in questions]
    for name, chosen in (("em", [row[: spec.top_k] for row in rows]), ("em_random", random_rows)):
        preds = []
        for s in range(0, len(questions), batch_size):
            part = questions[s:s + batch_size]
            docs = [[{"id": evidence.ids[r], "title": evidence.titles[r], "text": evidence.texts[r]} for r in row]
                    for row in chosen[s:s + batch_size]]
            preds += reader.predict([q["question"] for q in part], docs)
        scores = [int(squad_exact_match(p, q["answers"])) for p, q in zip(preds, questions)]
        out[name] = float(np.mean(scores))
        for rec, p, v in zip(records, preds, scores):
            rec[name] = v
            rec["prediction" if name == "em" else "prediction_random"] = p
    out["questions"] = len(questions)
    model.train(was)
    return out, records


def with_before(after: list[dict], before: list[dict]) -> list[dict]:
    """The after-training records, each with what the before-training evaluation said of the same question
    as ``<key>_before`` (the metrics under the names ``results.json`` uses)."""
    out = []
    for a, b in zip(after, before, strict=True):
        if a["id"] != b["id"]:
            raise ValueError(f"before/after records differ: {a['id']} != {b['id']}")
        out.append({**a, **{f"{k}_before": v for k, v in b.items() if k not in ("id", "question", "gold")}})
    return out
