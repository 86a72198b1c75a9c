"""Label-word log-likelihoods after a prompt, with the prompt's shared prefix computed once.

A prompt is ``prefix`` (instruction + examples, the same for every query of one example set) followed by
``suffix`` (the query); both are token lists, tokenised apart, so the context is exactly ``prefix +
suffix`` whichever path scores it. When every label word is one token, the prefix's keys and values are
computed once and each query runs only its own tokens on a copy of that cache (the cache's tensors are
never written in place: a new query concatenates onto them); the next-token log-softmax at the last
position gives every label word's score. Longer label words go through :func:`option_logprobs`, which
scores each word's tokens after the whole context in one padded batch.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from mwb.core.errors import DataError
from mwb.core.models.transformer import KVCache


@torch.no_grad()
def option_logprobs(lm, context: list[int], options: list[list[int]]) -> list[float]:
    """Σ log p(option tokens | context) for each option, in one padded batch. Rows are right-padded: the model
    is causal, so padding never changes a scored position."""
    rows = [(context + o)[-lm.max_length - 1:] for o in options]
    width = max(len(r) for r in rows) - 1
    pad = lm.eod if lm.eod is not None else 0
    inputs = torch.tensor([r[:-1] + [pad] * (width - len(r) + 1) for r in rows], dtype=torch.long)
    logp = lm.log_probs(inputs)
    scores = []
    for b, (row, opt) in enumerate(zip(rows, options)):
        n = len(opt)
        tgt = torch.tensor(row[-n:], device=logp.device)
        scores.append(float(logp[b, len(row) - 1 - n:len(row) - 1].gather(-1, tgt[:, None]).sum()))
    return scores


class LabelScorer:
    def __init__(self, lm, options: list[list[int]]) -> None:
        self.lm, self.options = lm, options
        self._key: Optional[tuple] = None
        self._cache: Optional[KVCache] = None

    def _prefix_cache(self, prefix: list[int]) -> KVCache:
        key = tuple(prefix)
        if key != self._key:
            cache = KVCache()
            self.lm.logits(torch.tensor([prefix], dtype=torch.long), cache=cache, last_only=True)
            self._key, self._cache = key, cache
        copy = KVCache()
        copy.k, copy.v = dict(self._cache.k), dict(self._cache.v)
        return copy

    @torch.no_grad()
    def __call__(self, prefix: list[int], suffix: list[int]) -> list[float]:
        """Σ log p(label word tokens | prefix + suffix), one value per label word."""
        if len(prefix) + len(suffix) + max(len(o) for o in self.options) > self.lm.max_length + 1:
            raise DataError(f"a prompt of {len(prefix) + len(suffix)} tokens is longer than the model's "
                            f"context ({self.lm.max_length}): use fewer --shots")
        if any(len(o) != 1 for o in self.options) or not prefix or not suffix:
            return option_logprobs(self.lm, prefix + suffix, self.options)
        cache = self._prefix_cache(prefix)
        logits = self.lm.logits(torch.tensor([suffix], dtype=torch.long), cache=cache, last_only=True)
        logp = F.log_softmax(logits[0, -1], dim=-1)
        return [float(logp[o[0]]) for o in self.options]
