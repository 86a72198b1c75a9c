"""Undo the tokenisation of WikiText (and PTB) so a subword model sees ordinary text.

Why: WikiText-103 ships pre-tokenised (``word @-@ word``, spaces before punctuation, ``= = Heading = =``).
A BPE model scored on that text is penalised for an odd spelling it never saw in training; GPT-2 and
Megatron's zero-shot evaluation therefore detokenise first and report the perplexity per *original* word
so numbers stay comparable. The rules below are the ones Megatron's ``wikitext_detokenizer`` applies,
written out as a table, in the same order.
"""
from __future__ import annotations

import re

# (old, new) literal replacements, applied in order.
_WIKITEXT_BEFORE_BRACKETS = [
    ("s '", "s'"),  # plural possessive: "the players ' union" → "the players' union"
    # number separators
    (" @-@ ", "-"),
    (" @,@ ", ","),
    (" @.@ ", "."),
    # punctuation: no space before
    (" : ", ": "),
    (" ; ", "; "),
    (" . ", ". "),
    (" ! ", "! "),
    (" ? ", "? "),
    (" , ", ", "),
]

# Paired brackets and quotes: drop the spaces just inside them ("( a b )" → "(a b)").
_PAIRS = [
    (re.compile(r"\(\s*([^\)]*?)\s*\)"), r"(\1)"),
    (re.compile(r"\[\s*([^\]]*?)\s*\]"), r"[\1]"),
    (re.compile(r"{\s*([^}]*?)\s*}"), r"{\1}"),
    (re.compile(r"\"\s*([^\"]*?)\s*\""), r'"\1"'),
    (re.compile(r"'\s*([^']*?)\s*'"), r"'\1'"),
]

_WIKITEXT_AFTER_BRACKETS = [
    # headings: "= = = Title = = =" → "=== Title ===" (longest first)
    ("= = = =", "===="),
    ("= = =", "==="),
    ("= =", "=="),
    (" \u00b0 ", "\u00b0"),  # degree sign
    (" \n", "\n"),
    ("\n ", "\n"),
    (" N ", " 1 "),  # WikiText/PTB number placeholder
    (" 's", "'s"),
]


def wikitext_detokenizer(text: str) -> str:
    """WikiText tokenised text → plain text (Megatron's rules; see the module docstring)."""
    for old, new in _WIKITEXT_BEFORE_BRACKETS:
        text = text.replace(old, new)
    for pattern, repl in _PAIRS:
        text = pattern.sub(repl, text)
    for old, new in _WIKITEXT_AFTER_BRACKETS:
        text = text.replace(old, new)
    return text


def ptb_detokenizer(text: str) -> str:
    """Penn Treebank (as in the PTB LM benchmark) → plain text: contractions, ``N`` numbers, ``$``/``#``."""
    for old, new in [(" '", "'"), (" \n", "\n"), ("\n ", "\n"), (" n't", "n't"), (" N ", "1 "),
                     ("$ 1", "$1"), ("# 1", "#1")]:
        text = text.replace(old, new)
    return text


def identity_detokenizer(text: str) -> str:
    return text


def detokenizer_for(path: str):
    """Pick the detokenizer from the file name, as Megatron does (``wiki``/``ptb`` in the name)."""
    name = path.lower()
    if "wiki" in name:
        return wikitext_detokenizer
    if "ptb" in name:
        return ptb_detokenizer
    return identity_detokenizer
