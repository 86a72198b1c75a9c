"""An automatic consistency measure for multi-actor dialogue: does a reply sound like its actor?

Boyd et al. (2020) judge consistency with people; here a sentence bi-encoder (all-MiniLM-L6-v2, through mwb's
retrieval encoder loader) stands in. Each actor is represented by the mean of the normalised embeddings of
``profile`` of its utterances taken from conversations outside the evaluated set; a reply is assigned to the
candidate actor (its true actor plus ``n - 1`` others, drawn by a seeded hash) whose profile is most cosine-
similar. The score is the share of replies assigned to their true actor; chance is ``1/n``. The same ranker
on the gold replies gives the ceiling the measure can reach on this data.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import data as dd


class ActorRanker:
    def __init__(self, encoder_dir: str, batch_size: int = 64) -> None:
        from mwb.core.tokenizers import load_tokenizer
        from mwb.retrieval.loading import load_biencoder

        self.source, self.model = load_biencoder(encoder_dir)
        self.tok = load_tokenizer(self.source.tokenizer)
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised ``[n, d]`` embeddings (query tower)."""
        from mwb.retrieval.biencoder import embed_texts
        from mwb.retrieval.inputs import pad_batch, query_ids, specials

        ids = query_ids(self.tok, [t or "." for t in texts], self.source.rcfg.query_length)
        pad = specials(self.tok)[2]
        batches = (pad_batch(ids[s:s + self.batch_size], pad) for s in range(0, len(ids), self.batch_size))
        emb = embed_texts(self.model, "query", batches).numpy()
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    def profiles(self, index: dict, actors: Sequence[str], exclude: set, profile: int) -> dict[str, np.ndarray]:
        out = {}
        for a in actors:
            texts = dd.references(index, a, exclude, profile, seed="profile")
            if texts:
                v = self.embed(texts).mean(0)
                out[a] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out


def candidate_actors(actor: str, pool: Sequence[str], n: int, key: str) -> list[str]:
    """``actor`` and ``n - 1`` others of ``pool``, chosen by a hash of ``key`` (the same every run)."""
    others = sorted((a for a in set(pool) if a != actor), key=lambda a: dd.bucket(a, key))[: n - 1]
    return [actor] + others


def consistency(ranker: ActorRanker, replies: Sequence[str], examples: list[dict], index: dict, n: int,
                profile: int = 10, golds: Optional[Sequence[str]] = None) -> dict[str, float]:
    """``{"consistency", "consistency_gold", "consistency_chance"}``: the share of ``replies`` (and of the gold
    replies) whose actor the ranker picks among ``n`` candidates."""
    return consistency_hits(ranker, replies, examples, index, n, profile, golds)[0]


def consistency_hits(ranker: ActorRanker, replies: Sequence[str], examples: list[dict], index: dict, n: int,
                     profile: int = 10, golds: Optional[Sequence[str]] = None) -> tuple[dict, dict]:
    """:func:`consistency`'s numbers and, per scored example, whether its actor was picked:
    ``{"consistency": {example index: 0/1}, "consistency_gold": {...}}`` (examples whose actor has no profile
    are not scored), so two runs on the same examples can be paired reply by reply."""
    exclude = {e["conversation"] for e in examples}
    pool = sorted({e["actor"] for e in examples})
    prof = ranker.profiles(index, pool, exclude, profile)
    pool = [a for a in pool if a in prof]
    n = min(n, len(pool))
    scored = [i for i, e in enumerate(examples) if e["actor"] in prof]
    out = {"consistency_chance": 1.0 / n if n else float("nan"), "consistency_n": n,
           "consistency_count": len(scored)}
    hits: dict = {}
    for name, texts in (("consistency", replies), ("consistency_gold", golds)):
        if texts is None or n < 2 or not scored:
            continue
        emb = ranker.embed([texts[i] for i in scored])
        per = {}
        for row, i in zip(emb, scored):
            cands = candidate_actors(examples[i]["actor"], pool, n, key=f"{examples[i]['conversation']}:{i}")
            sims = [float(row @ prof[a]) for a in cands]
            per[i] = int(int(np.argmax(sims)) == 0)
        out[name] = sum(per.values()) / len(scored)
        hits[name] = per
    return out, hits
