"""Shared pieces of language-model scoring: sliding windows over a long token stream, padded batches.

Megatron's ``--overlapping-eval`` windowing lives here so that every task that scores a long text (WikiText
perplexity, perplexity on held-out stories or pretraining data) scores each token exactly once.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import torch

from mwb.core.config import ConfigError


def rolling_windows(ids: Sequence[int], seq_length: int, stride: int) -> Iterator[tuple[int, list[int], int]]:
    """``(start, window, skip)`` covering ``ids``: ``window = ids[start : start+seq_length+1]`` (inputs are
    ``window[:-1]``, targets ``window[1:]``) and the first ``skip`` targets were scored by an earlier window.

    Windows start at ``0, stride, 2·stride, …``; the union of the unskipped targets is positions 1..N-1,
    each exactly once, so ``stride`` ≤ ``seq_length`` is required."""
    if not 1 <= stride <= seq_length:
        raise ConfigError(f"overlap/stride must be between 1 and seq_length ({seq_length}), got {stride}")
    n, start, scored = len(ids), 0, 0  # positions 1..scored are done
    while scored < n - 1:
        end = min(start + seq_length, n - 1)  # last position this window predicts
        yield start, list(ids[start:end + 1]), scored - start
        scored = end
        start += stride


def padded(rows: Sequence[Sequence[int]], pad: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


@torch.no_grad()
def window_nll(lm, items: Sequence[dict], batch_size: int, pad: int) -> Iterator[tuple[dict, float, int]]:
    """``(item, nll, count)`` for each window item (``{"tokens", "skip", …}`` from :func:`rolling_windows`):
    the summed negative log-likelihood (float64) of its targets after the first ``skip``, and how many there
    are. One scoring loop for every task that sums a long text's windows (WikiText, held-out documents)."""
    for batch in batches(items, batch_size):
        logp = lm.log_probs(padded([it["tokens"][:-1] for it in batch], pad))
        for b, it in enumerate(batch):
            n = len(it["tokens"]) - 1
            tgt = torch.tensor(it["tokens"][1:], device=logp.device)
            lp = logp[b, :n].gather(-1, tgt[:, None])[:, 0][it["skip"]:]
            yield it, -float(lp.double().sum()), int(lp.numel())
