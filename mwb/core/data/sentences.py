"""A small, dependency-free sentence splitter for ``--split-sentences`` (nltk's punkt data is not
available offline, so mwb does not use it).

Rule: a sentence ends after ``.``, ``!`` or ``?`` (plus any closing quotes/brackets) when whitespace and
then a capital letter, digit or opening quote follows; a blank line also ends one. The whitespace before a
sentence stays at its start, so ``"".join(split_sentences(t)) == t`` always holds and a byte-level
tokenizer sees each sentence as it would inside the document. Abbreviations ("Mr. Smith") are split
too; that is the price of having no model.
"""
from __future__ import annotations

import re

_END = re.compile(r"[.!?]+[\"'\u2019\u201d)\]]*(?=\s+[\"'\u2018\u201c(\[]?[A-Z0-9])")
_BLANK = re.compile(r"\n[ \t]*\n")


def split_sentences(text: str) -> list[str]:
    """Cut ``text`` into sentences; the pieces concatenate back to ``text`` exactly."""
    cuts = {m.end() for m in _END.finditer(text)} | {m.start() for m in _BLANK.finditer(text)}
    cuts = sorted(c for c in cuts if 0 < c < len(text))
    pieces, last = [], 0
    for c in cuts + [len(text)]:
        piece = text[last:c]
        last = c
        if not piece:
            continue
        if pieces and not piece.strip():  # whitespace only: keep it with the sentence before
            pieces[-1] += piece
        elif pieces and not pieces[-1].strip():
            pieces[-1] += piece
        else:
            pieces.append(piece)
    return pieces
