"""Evaluation metrics, each a pure function of predictions and references, with its definition.

Why plain functions: every task (zero-shot LM, fine-tuning, QA, NER, generation) computes its number in
exactly one place and the tests compare each function with a reference implementation (scikit-learn,
seqeval, the official SQuAD script's definition) on hand-made cases.
"""
from __future__ import annotations

import collections
import math
import re
import string
from typing import Iterable, Sequence


def accuracy(predictions: Sequence, references: Sequence) -> float:
    """Fraction of positions where ``predictions[i] == references[i]`` (``sklearn.metrics.accuracy_score``).

    Empty input gives 0.0 rather than a division error, so an empty shard can still be aggregated.
    """
    if len(predictions) != len(references):
        raise ValueError(f"accuracy: {len(predictions)} predictions for {len(references)} references")
    if not references:
        return 0.0
    return sum(1 for p, r in zip(predictions, references) if p == r) / len(references)


# ----------------------------------------------------------------------------------------------- SQuAD

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 official normalisation: lowercase, drop punctuation, drop articles (a/an/the), squash
    whitespace, in that order (``evaluate-v1.1.py``'s ``normalize_answer``)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def squad_exact_match(prediction: str, ground_truths: Sequence[str] | str) -> float:
    """1.0 if the normalised prediction equals any normalised ground truth (max over answers), else 0.0."""
    truths = [ground_truths] if isinstance(ground_truths, str) else list(ground_truths)
    return max((float(normalize_answer(prediction) == normalize_answer(t)) for t in truths), default=0.0)


def _f1_one(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, ground_truths: Sequence[str] | str) -> float:
    """Token-overlap F1 of normalised, whitespace-split answers (bag of tokens, multiset intersection),
    the maximum over ground truths; 0 when nothing overlaps (official SQuAD v1.1 ``f1_score``)."""
    truths = [ground_truths] if isinstance(ground_truths, str) else list(ground_truths)
    return max((_f1_one(prediction, t) for t in truths), default=0.0)


def squad_scores(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict:
    """Corpus EM and F1 in percent, as the official script reports them (mean of per-question maxima)."""
    if len(predictions) != len(references):
        raise ValueError(f"squad: {len(predictions)} predictions for {len(references)} questions")
    n = max(len(predictions), 1)
    em = sum(squad_exact_match(p, r) for p, r in zip(predictions, references))
    f1 = sum(squad_f1(p, r) for p, r in zip(predictions, references))
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}


# ------------------------------------------------------------------------------------------ perplexity


def perplexity(total_nll: float, num_tokens: int) -> float:
    """Token perplexity ``exp(Σ NLL / N)`` over the N scored tokens (natural log); ``inf`` on overflow."""
    if num_tokens <= 0:
        raise ValueError("perplexity needs at least one scored token")
    mean = total_nll / num_tokens
    return math.exp(mean) if mean < 700 else float("inf")


def word_perplexity(total_nll: float, num_words: int) -> float:
    """Word-level perplexity ``exp(Σ_tokens NLL / W)``: the summed token NLL spread over W original words.

    This is Megatron's "adjusted perplexity": ``exp(loss_per_token · tokens/words)``, which makes models with
    different tokenizers comparable on the same text (the words are counted on the original text)."""
    if num_words <= 0:
        raise ValueError("word perplexity needs at least one word")
    mean = total_nll / num_words
    return math.exp(mean) if mean < 700 else float("inf")


# ------------------------------------------------------------------------------------------ distinct-n


def distinct_n(texts: Iterable[Sequence[str] | str], n: int) -> float:
    """Distinct-n (Li et al., 2016): unique n-grams / total n-grams over all texts (corpus level).

    A text is a token list or a string split on whitespace; 0.0 when there is no n-gram at all."""
    if n < 1:
        raise ValueError("distinct-n needs n >= 1")
    seen, total = set(), 0
    for text in texts:
        tokens = text.split() if isinstance(text, str) else list(text)
        grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
        seen.update(grams)
        total += len(grams)
    return len(seen) / total if total else 0.0
