"""Questions/s of ``mwb eval qa``'s retrieval + answer matching, BM25 and DPR, against the old per-question path.

What it runs, on the default question set (the real DPR questions the bundled evidence answers) and the bundled
evidence: each retriever's batched top-``--k`` search of every question, then the first passage holding an
answer (DPR's string matching) two ways, in the same run:

* old: per question and passage :func:`mwb.retrieval.matching.first_hit` with a per-passage token cache and
  the answers re-tokenised for every passage (what ``mwb eval qa`` did before), timed on the first
  ``--old-questions`` questions (it takes minutes on all of them) and its rate extrapolated;
* new: :class:`mwb.retrieval.matching.CorpusMatcher` (passages tokenised once with a token → positions map,
  answers once per question) on every question.

The first hits of the two are checked equal on the old path's questions (the benchmark fails otherwise). The
rows: search s, matching s, questions/s of search + matching, and new/old. The index builds (BM25, the DPR
passage embeddings) are cached by ``mwb eval qa`` and not timed.

    python benchmarks/bench_qa_eval.py                         # bm25 and dpr (the default encoder)
    python benchmarks/bench_qa_eval.py --retrievers bm25 --old-questions 300 --limit 2000   # a smoke run
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mwb.retrieval.matching import CorpusMatcher, first_hit, normalize, simple_tokens  # noqa: E402
from mwb.retrieval.qa_system import build_system, default_encoder  # noqa: E402
from mwb.retrieval.inputs import BUNDLED_REAL_QUESTIONS, read_questions  # noqa: E402


def old_first_hits(evidence, answers, rows) -> list:
    """The per-question path ``mwb eval qa`` had: first_hit per question with a lazily filled token cache."""
    cache: dict = {}

    def tokens(r):
        if r not in cache:
            cache[r] = simple_tokens(normalize(evidence.texts[r]))
        return cache[r]

    out = []
    for ans, row in zip(answers, rows):
        top = [int(r) for r in row if r >= 0]
        out.append(first_hit(ans, [evidence.texts[r] for r in top], "string", tokens_of=lambda j, t=top: tokens(t[j])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--retrievers", default="bm25,dpr")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--limit", type=int, default=0, help="first N questions (0: all)")
    ap.add_argument("--old-questions", type=int, default=1000, help="questions the old path is timed on")
    args = ap.parse_args()
    qs = read_questions(BUNDLED_REAL_QUESTIONS)
    qs = qs[: args.limit] if args.limit else qs
    questions, answers = [q["question"] for q in qs], [q["answers"] for q in qs]
    names = [r for r in args.retrievers.split(",") if r]
    opts = {"evidence": None, "match": "string", "query_length": None, "context_length": None, "batch_size": 64,
            "index": "flat", "nprobe": 16}
    checkpoint = default_encoder(print) if "dpr" in names else None
    _, system = build_system(opts, names, checkpoint, None, None, 0, 1, None)
    n_old = min(args.old_questions, len(qs))
    print(f"{len(qs)} questions over {len(system.evidence)} passages, top-{args.k}; old path timed on {n_old}")
    print(f"{'retriever':9s} {'search s':>9s} {'old match s/q':>14s} {'new match s':>12s} "
          f"{'old q/s':>9s} {'new q/s':>9s} {'new/old':>8s}")
    for name in names:
        t = time.perf_counter()
        _, rows = system.retrievers[name].search(questions, args.k)
        search = time.perf_counter() - t
        t = time.perf_counter()
        old = old_first_hits(system.evidence, answers[:n_old], rows[:n_old])
        old_per_q = (time.perf_counter() - t) / max(n_old, 1)
        matcher = CorpusMatcher(system.evidence.texts, "string")  # fresh: passages tokenised inside the timing
        t = time.perf_counter()
        new = matcher.first_hits(answers, rows)
        new_match = time.perf_counter() - t
        if new[:n_old] != old:
            raise SystemExit(f"{name}: the new first hits differ from the old path's")
        per_q_search = search / len(qs)
        old_rate, new_rate = 1 / (per_q_search + old_per_q), len(qs) / (search + new_match)
        print(f"{name:9s} {search:9.2f} {old_per_q:14.5f} {new_match:12.2f} {old_rate:9.1f} {new_rate:9.1f} "
              f"{new_rate / old_rate:7.1f}x")


if __name__ == "__main__":
    main()
