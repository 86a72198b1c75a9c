"""The evaluation's control keywords and their inclusion: a word the user asks for that the story would not use.

Why: control means the story takes up a keyword it would not have written by itself. A keyword already in the
story (its first sentence, or what the gold story goes on to say) is written with or without control, so its
inclusion measures copying from the prompt, not control (issue 33). The test keyword of story i for sentence t
(2–5) is therefore a word of *another* story's sentence t — that sentence's RAKE phrases best first, each
phrase's last word (its head) first — that

- is a content word: letters only, at least 3 of them, not a stopword;
- shares no WordNet base form with any word of story i's five gold sentences, nor with story i's earlier test
  keywords (so it is in no story so far that the gold story or an earlier control could have written);
- has knowledge in the knowledge base: MEGATRON-CNTRL steers a sentence only through the knowledge its keywords
  retrieve, so a word with none cannot be controlled by any model of this design.

Stories i + 1, i + 2, … (cyclically) are tried in turn until one offers such a word. The choice depends on the
stories and the knowledge base only, never on a model, so every condition gets the same keywords.

Inclusion (:func:`new_inclusion`): the keyword (or one of its WordNet base forms) is a word of the sentence
written at its step and is not in the story written so far (the first sentence and the sentences before it):
a keyword that shows up only because an earlier sentence already had it does not count.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from mwb.core.errors import DataError

from .keywords import rake_scores, stopwords
from .knowledge import base_forms
from .metrics import words

MIN_LETTERS = 3


def word_forms(text: str) -> set:
    """Every word of ``text`` (lowercased) and its WordNet base forms."""
    out: set = set()
    for w in words(text):
        out |= base_forms(w) if w[:1].isalpha() else {w}
    return out


def candidate_words(sentence: str) -> list[str]:
    """Content words of ``sentence`` in the order they are tried: RAKE phrases best first, each phrase's words
    from its last (the head of a noun phrase) to its first; repeats dropped."""
    out: list[str] = []
    for phrase, _ in rake_scores(sentence):
        for w in reversed(phrase.split()):
            if w.isalpha() and len(w) >= MIN_LETTERS and w not in stopwords() and w not in out:
                out.append(w)
    return out


def control_keywords(stories: Sequence, has_knowledge: Optional[Callable[[str], bool]] = None,
                     steps: int = 4) -> list[list[list[str]]]:
    """For story ``i``: one keyword per sentence 2..``steps + 1`` (``[[k2], [k3], …]``), chosen as the module
    docstring says. ``has_knowledge(word)`` is the knowledge-base test (None: every word qualifies). Fewer than
    two stories, or a story for which no other story offers a word, is a DataError: the keywords must come
    from another story."""
    n = len(stories)
    if n < 2:
        raise DataError(f"control keywords come from another story: evaluate at least 2 stories (got {n})")
    known: dict[str, bool] = {}

    def knows(w: str) -> bool:
        if has_knowledge is None:
            return True
        if w not in known:
            known[w] = bool(has_knowledge(w))
        return known[w]

    out = []
    for i, story in enumerate(stories):
        taken = word_forms(" ".join(story.sentences))
        chosen: list[list[str]] = []
        for t in range(1, steps + 1):
            pick = None
            for offset in range(1, n):
                other = stories[(i + offset) % n]
                for w in candidate_words(other.sentences[t]):
                    if not (base_forms(w) & taken) and knows(w):
                        pick = w
                        break
                if pick:
                    break
            if pick is None:
                raise DataError(f"story {story.id}: no other story offers a keyword for sentence {t + 1} that is "
                                f"not already in it and has knowledge")
            chosen.append([pick])
            taken |= base_forms(pick)
        out.append(chosen)
    return out


def new_inclusion(keyword: str, sentence: str, before: str) -> bool:
    """Whether every word of ``keyword`` (or a base form of it) is a word of ``sentence`` (or a base form of
    one) and not all of them were already in ``before``, the story written so far."""
    forms = [base_forms(k) for k in words(keyword) if k[:1].isalpha()]
    if not forms:
        return False
    here, earlier = word_forms(sentence), word_forms(before)
    return all(f & here for f in forms) and not all(f & earlier for f in forms)


def inclusion_share(control: Sequence[Sequence[str]], sentences: Sequence[str]) -> float:
    """One story's share of control keywords newly included: ``control[t]`` are the keywords of sentence
    ``t + 2``, ``sentences`` the written story (first sentence first)."""
    hits = [new_inclusion(k, sentences[t + 1], " ".join(sentences[:t + 1]))
            for t, ks in enumerate(control) for k in ks]
    return sum(hits) / len(hits) if hits else 0.0
