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

import sys
from typing import Optional, Sequence

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
               eligible: Optional[set] = None) -> list[dict]:
    """Every ``(context, response)`` of ``conversations`` whose responder is ``responder`` (WoW: the Wizard) or
    in ``eligible`` (chitchat: actors with enough conversations), as ``{"conversation", "turn", "context",
    "response"}``, in a stable hashed order (so taking the first N samples many conversations)."""
    out = []
    for c in conversations:
        for i, (ctx, resp) in enumerate(dd.responses(c, context_turns), start=1):
            if responder is not None and resp.speaker != responder:
                continue
            if eligible is not None and resp.speaker not in eligible:
                continue
            out.append({"conversation": c["id"], "turn": i, "context": ctx, "response": resp})
    return sorted(out, key=lambda e: dd.bucket(f"{e['conversation']}:{e['turn']}", "examples"))


def retrieve(queries: list[str], evidence: Optional[str], retriever: str, k: int) -> list[list[str]]:
    """Top-``k`` passage texts per query from the evidence TSV (default: the bundled Wikipedia passages)
    with mwb's BM25 or DPR retriever (:func:`mwb.retrieval.system.build_system`)."""
    from mwb.retrieval.system import build_system, default_encoder
    opts = {"evidence": evidence, "match": "string", "query_length": 64, "context_length": 256, "batch_size": 64,
            "index": "flat", "nprobe": 16}
    encoder = default_encoder(lambda m: print(f"mwb: {m}", file=sys.stderr)) if retriever == "dpr" else None
    _, system = build_system(opts, [retriever], encoder, None, None, 0, 1, None)
    _, rows = system.retrievers[retriever].search(queries, k)
    return [[system.evidence.texts[int(r)] for r in row] for row in rows]


def query_text(context: Sequence[dd.Turn], turns: int = 2) -> str:
    """The retrieval query: the last ``turns`` turns of the context."""
    return " ".join(t.text for t in context[-turns:])


def build(items: list[dict], index: dict, references_k: int, knowledge: Optional[list[list[str]]],
          top_k: int, gold_knowledge: bool) -> list[dict]:
    """Examples from :func:`candidates` ``items``: prompt, target, actor, and ``knowledge_ref`` (the gold
    knowledge when the data has it, else the top retrieved passage as shown) for KF1."""
    out = []
    for n, it in enumerate(items):
        resp = it["response"]
        refs = dd.references(index, resp.speaker, it["conversation"], references_k, seed=f"{it['conversation']}:"
                             f"{it['turn']}") if references_k else []
        passages = knowledge[n] if knowledge is not None else []
        shown = [resp.knowledge] if gold_knowledge and resp.knowledge else passages[:top_k]
        ref = resp.knowledge or (clip(passages[0]) if passages else None)
        out.append({"id": f"{it['conversation']}:{it['turn']}",
                    "prompt": render_prompt(it["context"], resp.speaker, refs, shown), "target": resp.text,
                    "actor": resp.speaker, "conversation": it["conversation"], "knowledge_ref": ref,
                    "topic": resp.topic})
    return out
