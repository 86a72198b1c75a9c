"""DPR's answer matching and top-k retrieval accuracy, reimplemented so numbers compare with published ones.

Retrieval accuracy in the DPR paper (and Megatron's ORQA evaluation) counts a question as answered at k
when any of the top-k passages *contains* an answer, under DPR's own definition of "contains":

* ``string`` mode: the passage text and each answer are Unicode-NFD-normalised, tokenised by DPR's
  ``SimpleTokenizer`` and lower-cased; the answer matches when its token list occurs contiguously in the
  passage's. The tokenizer emits maximal runs of letters/digits/combining marks (``\\p{L}\\p{N}\\p{M}``)
  and every other single non-space, non-control character as its own token. Consequences the tests pin
  down: matching is case-insensitive, punctuation is significant ("U.S." is ``u . s .``), whole words only
  ("cat" does not match "cats"), accents are *not* folded ("Cafe" does not match "Café"), and an answer
  with no tokens matches every passage (DPR's loop compares an empty slice).
* ``regex`` mode (CuratedTREC): each answer is a regular expression searched case-insensitively in the
  NFD text; an answer that is not a valid pattern never matches.

Only the passage *text* is searched, never its title, exactly as DPR does. The tokenizer uses the
``regex`` package (as DPR does) when it is installed, and an equivalent scan over Unicode categories
otherwise, so mwb does not depend on it.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Optional, Sequence

try:  # the same pattern as DPR's SimpleTokenizer
    import regex as _regex

    _TOKEN = _regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])",
                            flags=_regex.IGNORECASE | _regex.UNICODE | _regex.MULTILINE)
except ImportError:  # pragma: no cover - exercised by the category scanner test
    _TOKEN = None

MATCH_MODES = ("string", "regex")


def normalize(text: str) -> str:
    """DPR's ``_normalize``: Unicode NFD (accented letters become letter + combining mark)."""
    return unicodedata.normalize("NFD", text)


def _scan_tokens(text: str) -> list[str]:
    """The SimpleTokenizer without ``regex``: runs of L/N/M characters, or one non-Z/non-C character."""
    out, run = [], []
    for ch in text:
        cat = unicodedata.category(ch)[0]
        if cat in "LNM":
            run.append(ch)
            continue
        if run:
            out.append("".join(run))
            run = []
        if cat not in "ZC":
            out.append(ch)
    if run:
        out.append("".join(run))
    return out


def simple_tokens(text: str, uncased: bool = True, use_regex: Optional[bool] = None) -> list[str]:
    """DPR ``SimpleTokenizer().tokenize(text).words(uncased)``."""
    if (use_regex is None and _TOKEN is not None) or (use_regex and _TOKEN is not None):
        words = [m.group() for m in _TOKEN.finditer(text)]
    else:
        words = _scan_tokens(text)
    return [w.lower() for w in words] if uncased else words


def _contains(tokens: Sequence[str], answer: Sequence[str]) -> bool:
    n = len(answer)
    answer = list(answer)
    for i in range(0, len(tokens) - n + 1):
        if list(tokens[i:i + n]) == answer:
            return True
    return False


def regex_match(text: str, pattern: str) -> bool:
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except (re.error, TypeError, ValueError, OverflowError, RecursionError):
        return False
    return compiled.search(text) is not None


def has_answer(answers: Iterable[str], text: str, mode: str = "string",
               text_tokens: Optional[Sequence[str]] = None) -> bool:
    """Whether ``text`` contains any of ``answers`` (DPR's ``has_answer``). ``text_tokens`` may pass the
    already tokenised passage (``simple_tokens(normalize(text))``) when one passage is checked often."""
    if mode not in MATCH_MODES:
        raise ValueError(f"unknown match mode '{mode}' (use {' or '.join(MATCH_MODES)})")
    if mode == "regex":
        text = normalize(text)
        return any(regex_match(text, normalize(a)) for a in answers)
    tokens = text_tokens if text_tokens is not None else simple_tokens(normalize(text))
    return any(_contains(tokens, simple_tokens(normalize(a))) for a in answers)


def first_hit(answers: Sequence[str], passages: Sequence[str], mode: str = "string",
              tokens_of=None) -> Optional[int]:
    """0-based rank of the first passage that contains an answer, or None. ``tokens_of(i)`` may supply
    cached tokens of ``passages[i]``."""
    for rank, text in enumerate(passages):
        toks = tokens_of(rank) if (tokens_of is not None and mode == "string") else None
        if has_answer(answers, text, mode, toks):
            return rank
    return None


class CorpusMatcher:
    """:func:`first_hit` for many questions over one passage corpus, same answers, far faster: in ``string``
    mode every passage is normalised and tokenised once, into an inverted index (token → the passages and
    positions where it occurs); each distinct answer is then looked up once — at the postings of its rarest
    token, comparing the passage tokens around each — giving the set of passages that contain it, cached. A
    question's first hit is the first of its top-k rows in the union of its answers' sets. The old path
    re-tokenised every answer for every passage and scanned every position of each passage, which made ``mwb
    eval qa`` on 14,139 questions take minutes. In ``regex`` mode each passage is normalised once and each
    answer compiled once per question (DPR's regex semantics, per passage)."""

    def __init__(self, texts: Sequence[str], mode: str = "string") -> None:
        if mode not in MATCH_MODES:
            raise ValueError(f"unknown match mode '{mode}' (use {' or '.join(MATCH_MODES)})")
        self.texts, self.mode = texts, mode
        self._tokens: Optional[list[list[str]]] = None
        self._postings: dict[str, list[tuple[int, int]]] = {}
        self._rows: dict[str, frozenset] = {}  # answer text → rows containing it
        self._by_tokens: dict[tuple, frozenset] = {}  # answer tokens → rows containing them
        self._normalized: dict[int, str] = {}

    def _index(self) -> list[list[str]]:
        if self._tokens is None:
            self._tokens = [simple_tokens(normalize(t)) for t in self.texts]
            for row, toks in enumerate(self._tokens):
                for pos, tok in enumerate(toks):
                    self._postings.setdefault(tok, []).append((row, pos))
        return self._tokens

    def tokens(self, row: int) -> list[str]:
        """``simple_tokens(normalize(texts[row]))``."""
        return self._index()[row]

    def rows_with(self, answer: str) -> frozenset:
        """The corpus rows whose text contains ``answer`` (string mode; DPR's token rule), cached per answer."""
        got = self._rows.get(answer)
        if got is None:
            key = tuple(simple_tokens(normalize(answer)))
            got = self._by_tokens.get(key)
            if got is None:
                got = self._by_tokens[key] = self._find(key)
            self._rows[answer] = got
        return got

    def _find(self, key: tuple) -> frozenset:
        toks = self._index()
        if not key:  # DPR: an empty answer matches every passage
            return frozenset(range(len(toks)))
        off = min(range(len(key)), key=lambda i: len(self._postings.get(key[i], ())))
        n, want = len(key), list(key)
        return frozenset(row for row, pos in self._postings.get(key[off], ())
                         if pos >= off and toks[row][pos - off:pos - off + n] == want)

    def _regex_hit(self, patterns: list, row: int) -> bool:
        text = self._normalized.get(row)
        if text is None:
            text = self._normalized[row] = normalize(self.texts[row])
        return any(p.search(text) is not None for p in patterns)

    def first_hit(self, answers: Iterable[str], rows: Sequence[int]) -> Optional[int]:
        """0-based rank in ``rows`` (corpus rows, best first) of the first passage holding an answer, or None."""
        if self.mode == "regex":
            patterns = []
            for a in answers:
                try:
                    patterns.append(re.compile(normalize(a), flags=re.IGNORECASE | re.UNICODE | re.MULTILINE))
                except (re.error, TypeError, ValueError, OverflowError, RecursionError):
                    continue  # an invalid pattern never matches
            hits = (rank for rank, row in enumerate(rows) if self._regex_hit(patterns, int(row)))
            return next(hits, None)
        holding = frozenset().union(*(self.rows_with(a) for a in answers))
        return next((rank for rank, row in enumerate(rows) if row in holding), None)

    def first_hits(self, answers: Sequence[Iterable[str]], rows) -> list[Optional[int]]:
        """:meth:`first_hit` of question ``i``'s answers over ``rows[i]`` (negative rows — faiss's "none" —
        skipped), for every question."""
        rows = rows.tolist() if hasattr(rows, "tolist") else rows  # Python ints: fast set membership
        return [self.first_hit(a, [r for r in row if r >= 0]) for a, row in zip(answers, rows)]


def top_k_accuracy(first_hits: Sequence[Optional[int]], ks: Sequence[int]) -> dict[int, float]:
    """Fraction of questions whose first hit lies within the top k, for each k (DPR's top-k hits / n)."""
    n = max(len(first_hits), 1)
    return {k: sum(1 for h in first_hits if h is not None and h < k) / n for k in ks}


def parse_ks(text) -> list[int]:
    """``"1,5,20,100"`` → ``[1, 5, 20, 100]`` (sorted, unique, positive)."""
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        items = [t for t in str(text).replace(" ", "").split(",") if t]
    try:
        ks = sorted({int(t) for t in items})
    except ValueError:
        raise ValueError(f"--top-k expects comma-separated integers such as 1,5,20,100, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--top-k values must be positive integers, got {text!r}")
    return ks
