"""Salient spans (named entities and dates) found by regular expressions, and the masked-salient-span query.

Why: REALM and Sachan et al. (ACL 2021) pretrain retrievers on *masked salient spans* (MSS) — a sentence with
one named entity or date blanked out is a question whose answer is in the passage the sentence came from —
so the retriever learns to look up facts without labelled questions. The papers find spans with a trained
NER tagger; a documented regular-expression detector is what this package can ship offline, and the issue
accepts it. What it finds, in this order of preference when spans overlap:

``date``    a day–month–year ("12 March 1990", "March 12, 1990"), month–year ("March 1990"), day–month
            ("12 March"), a bare month name after "in"/"on"/"since"/"until"/"by", or a year 1000–2099
            (optionally "1990s"), written as a whole word
``entity``  a run of capitalised words ("United States", "Isaac Newton") that may hold the connectors
            "of", "the", "de", "da", "von", "van", "and" between capitalised words ("Bank of England"); a
            single capitalised word counts only when it is not the first word of its sentence (there the
            capital says nothing), and a run that starts a sentence drops a leading function word
            ("The", "In", "However", …) first

Limits, stated: lowercase entities ("iPhone"), entities in all-caps acronyms of one letter, and names that
start a sentence as one word ("Paris is …") are missed; capitalised common words inside titles are kept.

:func:`mask_salient` turns a sentence into an MSS query: the chosen span is replaced by ``mask`` ("[MASK]" by
default, or "_" for tokenizers without it) and returned as the answer. :func:`salient_question` writes the same
query as a question ("… form the what?"), and :func:`mss_questions` draws such questions from an evidence
collection: reader training data whose answers are in the passages they came from, so a reader trained on
them must read (a language model answers real trivia questions from its weights as often as from passages).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mwb.core.data.sentences import split_sentences

MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
          "Jan\\.|Feb\\.|Mar\\.|Apr\\.|Aug\\.|Sept?\\.|Oct\\.|Nov\\.|Dec\\.")
_YEAR = r"(?:1\d{3}|20\d{2})"
_DAY = r"(?:[12]\d|3[01]|0?[1-9])"
DATE = re.compile(
    rf"\b(?:{_DAY}\s+(?:{MONTHS})(?:,?\s+{_YEAR})?"            # 12 March [1990]
    rf"|(?:{MONTHS})\s+{_DAY}(?:st|nd|rd|th)?,?\s+{_YEAR}"      # March 12, 1990
    rf"|(?:{MONTHS})\s+{_YEAR}"                                 # March 1990
    rf"|(?<=\b(?:in|on|by) )(?:{MONTHS})(?!\w)"                 # in March
    rf"|(?<=\b(?:since|until) )(?:{MONTHS})(?!\w)"
    rf"|{_YEAR}s?)(?!\w)")
_CAP = r"[A-Z][\w'’\-]*"
_CONNECT = r"(?:of|the|de|da|du|von|van|der|and|la|le)"
ENTITY = re.compile(rf"\b{_CAP}(?:\s+(?:{_CONNECT}\s+)*{_CAP})*")
SENTENCE_START = re.compile(r"(?:^|[.!?]['\"”’)]?\s+|\n\s*)$")
FUNCTION_WORDS = frozenset(
    "the a an in on at by for from to of as after before during since until while when where although though "
    "however this that these those it its he she they his her their we our i there here but and or so if "
    "with without into upon also then thus many most some several one two both each".split())


@dataclass(frozen=True)
class Span:
    """A salient span: characters ``start:end`` of the text, the span ``text`` and its ``kind`` (date or entity)."""
    start: int
    end: int
    text: str
    kind: str


def _sentence_initial(text: str, pos: int) -> bool:
    return bool(SENTENCE_START.search(text[:pos]))


def _entities(text: str) -> list[Span]:
    out = []
    for m in ENTITY.finditer(text):
        s, e = m.span()
        words = list(re.finditer(r"\S+", text[s:e]))
        if _sentence_initial(text, s) and words[0].group().lower() in FUNCTION_WORDS:
            if len(words) == 1:
                continue
            nxt = s + words[1].start()
            rest = ENTITY.match(text, nxt)
            if rest is None:
                continue
            s = nxt
            words = list(re.finditer(r"\S+", text[s:e]))
        elif _sentence_initial(text, s) and len(words) == 1:
            continue
        while words and words[-1].group().lower() in FUNCTION_WORDS | {"de", "da", "du", "von", "van", "der",
                                                                        "la", "le"}:
            words.pop()  # a trailing connector belongs to no name
        if not words:
            continue
        e = s + words[-1].end()
        out.append(Span(s, e, text[s:e], "entity"))
    return out


def salient_spans(text: str) -> list[Span]:
    """Dates and capitalised names in ``text``, in order, without overlaps (a date wins over a name that
    overlaps it; among names, the earlier)."""
    dates = [Span(m.start(), m.end(), m.group(), "date") for m in DATE.finditer(text)]
    chosen = list(dates)
    for ent in _entities(text):
        if any(ent.start < d.end and d.start < ent.end for d in chosen):
            continue
        if ent.text in {m for m in MONTHS.replace("\\", "").split("|")}:
            continue  # a month name alone is a date only after in/on/by/since/until
        chosen.append(ent)
    return sorted(chosen, key=lambda sp: sp.start)


def mask_salient(sentence: str, rng=None, mask: str = "[MASK]") -> Optional[tuple[str, Span]]:
    """``(query, span)``: ``sentence`` with one salient span replaced by ``mask``, and that span; ``None``
    when the sentence has none. ``rng`` (a ``numpy.random.Generator``) picks the span uniformly, as REALM
    does; without it the first span is masked."""
    spans = salient_spans(sentence)
    if not spans:
        return None
    span = spans[int(rng.integers(len(spans)))] if rng is not None else spans[0]
    return sentence[:span.start] + mask + sentence[span.end:], span


def salient_question(sentence: str, rng=None, max_words: int = 5) -> Optional[tuple[str, Span]]:
    """``(question, span)``: the MSS query of ``sentence`` with the span written as "what" (a name), "what
    year" (a bare year) or "when" (another date) and a question mark; ``None`` when the sentence has no span,
    the span is longer than ``max_words`` words or appears again in the question, or the sentence already
    holds a "what"/"when" (the question would be ambiguous)."""
    if re.search(r"\b(?:what|when)\b", sentence, re.IGNORECASE):
        return None
    found = mask_salient(sentence, rng, mask="\0")
    if found is None:
        return None
    query, span = found
    if len(span.text.split()) > max_words or span.text.lower() in query.lower():
        return None
    wh = "what" if span.kind != "date" else ("what year" if span.text.isdigit() else "when")
    return query.replace("\0", wh).rstrip(" .;:!") + "?", span


def mss_questions(texts: Sequence[str], n: int, seed: int = 0, min_words: int = 8) -> list[dict]:
    """Up to ``n`` questions ``{"question", "answers": [span], "passage": row}``, one per passage drawn in a
    seeded random order, from one random sentence of at least ``min_words`` words; answers do not repeat."""
    rng = np.random.default_rng([seed, 13])
    out: list[dict] = []
    seen: set[str] = set()
    for row in rng.permutation(len(texts)).tolist():
        sents = [x.strip() for x in split_sentences(texts[row]) if len(x.split()) >= min_words]
        if not sents:
            continue
        made = salient_question(sents[int(rng.integers(len(sents)))], rng)
        if made is None or made[1].text in seen:
            continue
        seen.add(made[1].text)
        out.append({"question": made[0], "answers": [made[1].text], "passage": row})
        if len(out) == n:
            break
    return out
