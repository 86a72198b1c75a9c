"""How well a vocabulary fits a domain: pieces per word and the share of domain terms kept whole.

Why: BioMegatron's first finding is that a vocabulary learned from PubMed splits biomedical words into fewer
pieces than a general one (``acetaminophen`` one piece instead of five), which shortens inputs and keeps
terms as units. This measures it on held-out text for any tokenizers mwb loads, so the comparison is a
table, not a claim. Words are runs of letters/digits (punctuation is not counted); each distinct word is
encoded once on its own, with a leading space so byte-level BPE sees a word start, and weighted by its count.
"""
from __future__ import annotations

import collections
import re
from typing import Iterable, Optional, Sequence

WORD = re.compile(r"\w+", re.UNICODE)


def word_counts(texts: Iterable[str]) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for t in texts:
        counts.update(WORD.findall(t))
    return counts


def pieces(tokenizer, words: Sequence[str]) -> dict[str, int]:
    """Number of tokens of each word encoded alone (after a space)."""
    return {w: len(ids) for w, ids in zip(words, tokenizer.encode_batch([" " + w for w in words]))}


def vocab_report(tokenizer, counts: collections.Counter, terms: Optional[Sequence[str]] = None) -> dict:
    """``{"vocab_size", "words", "pieces_per_word", "words_whole", "terms", "terms_whole",
    "term_pieces_per_word"}``; a term (one or more words) is kept whole when each of its words is one piece;
    ``term_pieces_per_word`` is the pieces of the terms' words over their number (BioMegatron's Table 3
    rate, "#tokens/#words" of the entities). Terms count as listed: repeat a term to weight it."""
    terms = [t for t in (terms or []) if WORD.findall(t)]
    vocab = sorted(set(counts) | {w for t in terms for w in WORD.findall(t)})
    n = pieces(tokenizer, vocab)
    total = sum(counts.values())
    out = {"vocab_size": tokenizer.vocab_size, "words": total,
           "pieces_per_word": sum(n[w] * c for w, c in counts.items()) / total if total else 0.0,
           "words_whole": sum(c for w, c in counts.items() if n[w] == 1) / total if total else 0.0}
    if terms:
        out["terms"] = len(terms)
        out["terms_whole"] = sum(all(n[w] == 1 for w in WORD.findall(t)) for t in terms) / len(terms)
        term_words = [w for t in terms for w in WORD.findall(t)]
        out["term_pieces_per_word"] = sum(n[w] for w in term_words) / len(term_words)
    return out


def format_report(rows: dict[str, dict]) -> str:
    """A fixed-width table, one row per tokenizer."""
    head = f"{'tokenizer':<40} {'vocab':>7} {'pieces/word':>12} {'words whole':>12} {'terms whole':>12}"
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        terms = f"{100 * r['terms_whole']:>11.1f}%" if "terms_whole" in r else f"{'-':>12}"
        lines.append(f"{name[-40:]:<40} {r['vocab_size']:>7} {r['pieces_per_word']:>12.3f} "
                     f"{100 * r['words_whole']:>11.1f}% {terms}")
    return "\n".join(lines)
