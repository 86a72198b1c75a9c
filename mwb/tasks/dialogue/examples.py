"""Dialogue conversations → generative examples: a prompt (actor references and/or knowledge, then the
context) and the next turn as the target.

Why a module of its own: the multi-actor and the knowledge-grounded settings build their prompts the same
way and differ only in what comes before the context, and ``mwb chat`` renders a live conversation with the
same :func:`render_prompt`, so a model answers in chat exactly as it was trained.

Prompt layout (the responding speaker is always ``B``, the other ``A``)::

    Reference utterances of B:        (k utterances of the responding actor, from other conversations)
    - ...
    Knowledge:                        (top-k retrieved passages, clipped)
    ...
    Conversation:
    A: ...
    B: ...
    B:

The target is `` <response>`` (the loss covers the response and the closing end-of-document only).
"""
from __future__ import annotations

import hashlib
import sys
from typing import Optional, Sequence

import numpy as np

from mwb.core.errors import DataError

from . import data as dd

RESPONDER, PARTNER = "B", "A"
CLIP_WORDS = 40  # a knowledge passage, or a context turn (its end), is cut to this many words
REFERENCE_WORDS = 25  # a reference utterance is cut to this many words


def clip(text: str, words: int = CLIP_WORDS, keep_end: bool = False) -> str:
    parts = text.split()
    return " ".join(parts[-words:] if keep_end else parts[:words])


def render_prompt(context: Sequence[dd.Turn], responder: str, references: Sequence[str] = (),
                  knowledge: Sequence[str] = ()) -> str:
    lines = []
    if references:
        lines += [f"Reference utterances of {RESPONDER}:"] + [f"- {clip(r, REFERENCE_WORDS)}" for r in references]
    if knowledge:
        lines += ["Knowledge:"] + [clip(k) for k in knowledge]
    lines.append("Conversation:")
    lines += [f"{RESPONDER if t.speaker == responder else PARTNER}: {clip(t.text, keep_end=True)}" for t in context]
    lines.append(f"{RESPONDER}:")
    return "\n".join(lines)


def candidates(conversations: list[dict], context_turns: int, responder: Optional[str] = None,
               eligible: Optional[set] = None, sample_seed: int = 0) -> list[dict]:
    """Every ``(context, response)`` of ``conversations`` whose responder is ``responder`` (WoW: the Wizard) or
    in ``eligible`` (chitchat: actors with enough conversations), as ``{"conversation", "turn", "context",
    "response"}``, in a stable hashed order (so taking the first N samples many conversations). Another
    ``sample_seed`` is another hashed order (0: the default), so the first N are another sample: repeated runs
    then replicate over conversations, not over the same items."""
    out = []
    for c in conversations:
        for i, (ctx, resp) in enumerate(dd.responses(c, context_turns), start=1):
            if responder is not None and resp.speaker != responder:
                continue
            if eligible is not None and resp.speaker not in eligible:
                continue
            out.append({"conversation": c["id"], "turn": i, "context": ctx, "response": resp})
    salt = "examples" if not sample_seed else f"examples-{sample_seed}"
    return sorted(out, key=lambda e: dd.bucket(f"{e['conversation']}:{e['turn']}", salt))


def retrieve(queries: list[str], evidence: Optional[str], retriever: str, k: int) -> list[list[str]]:
    """Top-``k`` passage texts per query from the evidence TSV (default: the bundled Wikipedia passages)
    with mwb's BM25 or DPR retriever (:func:`mwb.retrieval.qa_system.build_system`)."""
    from mwb.retrieval.qa_system import build_system, default_encoder
    opts = {"evidence": evidence, "match": "string", "query_length": 64, "context_length": 256, "batch_size": 64,
            "index": "flat", "nprobe": 16}
    encoder = default_encoder(lambda m: print(f"mwb: {m}", file=sys.stderr)) if retriever == "dpr" else None
    _, system = build_system(opts, [retriever], encoder, None, None, 0, 1, None)
    _, rows = system.retrievers[retriever].search(queries, k)
    return [[system.evidence.texts[int(r)] for r in row] for row in rows]


def draw_passages(keys: Sequence[str], evidence: Optional[str], k: int, seed: int,
                  exclude: Sequence[Sequence[str]]) -> list[list[str]]:
    """``k`` passage texts per key drawn uniformly at random from the evidence TSV (the pool :func:`retrieve`
    searches), never one of that key's ``exclude`` texts (the passages retrieved for it): the control that
    puts *a* passage in the prompt where the retrieved one would be. Each key's draw is its own numpy
    Generator seeded by ``(seed, md5(key))``, so it depends on neither the order nor the number of examples."""
    from mwb.retrieval.inputs import read_evidence
    texts = read_evidence(evidence or _default_evidence()).texts
    distinct = set(texts)
    out = []
    for key, skip in zip(keys, exclude):
        banned = set(skip)
        if len(distinct) - len(distinct & banned) < k:
            raise DataError(f"{evidence}: {len(distinct)} distinct passages leave fewer than {k} to draw for "
                            f"{key!r} once its retrieved ones are set aside")
        rng = np.random.default_rng([seed, int(hashlib.md5(key.encode()).hexdigest()[:15], 16)])
        picked: list[str] = []
        while len(picked) < k:
            t = texts[int(rng.integers(len(texts)))]
            if t not in banned and t not in picked:
                picked.append(t)
        out.append(picked)
    return out


def _default_evidence() -> str:
    from mwb.retrieval.inputs import BUNDLED_EVIDENCE
    return BUNDLED_EVIDENCE


def query_text(context: Sequence[dd.Turn], turns: int = 2) -> str:
    """The retrieval query: the last ``turns`` turns of the context."""
    return " ".join(t.text for t in context[-turns:])


def build(items: list[dict], index: dict, references_k: int, knowledge: Optional[list[list[str]]],
          top_k: int, gold_knowledge: bool, drawn: Optional[list[list[str]]] = None,
          reference_actor: str = "self") -> list[dict]:
    """Examples from :func:`candidates` ``items``: prompt, target, actor, and ``knowledge_ref`` (the gold
    knowledge when the data has it, else the top retrieved passage, clipped as the prompt clips it) for KF1.
    ``drawn`` (:func:`draw_passages`) replaces the retrieved passages *in the prompt* only: ``knowledge_ref``
    stays the retrieved one, so KF1 measures the same overlap in every condition. ``reference_actor="other"``
    shows the references of another actor (:func:`mwb.tasks.dialogue.data.other_actor`) under the same header:
    the control for the responder's own; ``reference_actor`` in each example names whose they are."""
    out = []
    for n, it in enumerate(items):
        resp = it["response"]
        key = f"{it['conversation']}:{it['turn']}"
        whose = resp.speaker
        if references_k and reference_actor == "other":
            speakers = {t.speaker for t in it["context"]}
            whose = dd.other_actor(index, resp.speaker, speakers, it["conversation"], references_k, seed=key)
            if whose is None:
                raise DataError(f"dialogue example {key}: no other actor has {references_k} utterances to show "
                                f"as references")
        refs = dd.references(index, whose, it["conversation"], references_k, seed=key) if references_k else []
        passages = knowledge[n] if knowledge is not None else []
        shown = [resp.knowledge] if gold_knowledge and resp.knowledge else \
            (drawn[n] if drawn is not None else passages)[:top_k]
        ref = resp.knowledge or (clip(passages[0]) if passages else None)
        out.append({"id": f"{it['conversation']}:{it['turn']}",
                    "prompt": render_prompt(it["context"], resp.speaker, refs, shown), "target": resp.text,
                    "actor": resp.speaker, "conversation": it["conversation"], "knowledge_ref": ref,
                    "topic": resp.topic, "reference_actor": whose if refs else None})
    return out
