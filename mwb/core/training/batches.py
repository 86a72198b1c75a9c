"""Which samples each rank trains on, and a synthetic token stream for tests.

Global step ``k`` consumes samples ``k·G … k·G+G−1`` of the (already shuffled) dataset, G the global batch.
Data-parallel rank ``r`` takes the contiguous block ``r·G/dp …`` of that range and cuts it into micro-batches.
So the set of samples in every optimizer step is the same for every layout, which is what makes the
per-step losses of different layouts comparable, and resuming at step k needs nothing but k. With a
batch-size ramp-up (:mod:`.rampup`) the global batch of a step varies, and a step starts at the number of
samples consumed before it instead of k·G (:func:`microbatches_from`).
"""
from __future__ import annotations

import numpy as np
import torch


def sample_indices(start: int, global_batch: int, micro_batch: int, dp_size: int, dp_rank: int) -> list[list[int]]:
    """This data-parallel rank's micro-batches of the global batch of samples ``start … start+G−1``."""
    per_rank = global_batch // dp_size
    base = start + dp_rank * per_rank
    return [list(range(base + m, base + m + micro_batch)) for m in range(0, per_rank, micro_batch)]


def collate(samples: list[dict], device="cpu") -> dict:
    out = {}
    for key in samples[0]:
        arr = np.stack([np.asarray(s[key]) for s in samples])
        t = torch.from_numpy(arr)
        if t.dtype in (torch.int32, torch.uint16, torch.int16, torch.uint8):
            t = t.long()
        out[key] = t.to(device)
    return out


def get_microbatches(dataset, step: int, global_batch: int, micro_batch: int, dp_size: int, dp_rank: int,
                     device="cpu") -> list[dict]:
    return microbatches_from(dataset, step * global_batch, global_batch, micro_batch, dp_size, dp_rank, device)


def microbatches_from(dataset, start: int, global_batch: int, micro_batch: int, dp_size: int, dp_rank: int,
                      device="cpu") -> list[dict]:
    """This rank's collated micro-batches of the global batch that starts at sample ``start``."""
    n = len(dataset)
    return [collate([dataset[i % n] for i in idx], device)
            for idx in sample_indices(start, global_batch, micro_batch, dp_size, dp_rank)]


class SyntheticTokens:
    """A deterministic, learnable GPT token stream (used before/without real data, and by tests).

    Sample ``i`` is a noisy arithmetic progression ``(a + b·t) mod V`` with ``a, b`` drawn from a generator
    seeded by (seed, i): a model can learn to continue it, so the loss falls, and every rank computes the
    same sample ``i`` with no files or communication.
    """

    def __init__(self, vocab_size: int, seq_length: int, num_samples: int = 10**9, seed: int = 0) -> None:
        self.vocab_size, self.seq_length, self.num_samples, self.seed = vocab_size, seq_length, num_samples, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, int(i)])
        a, b = rng.integers(0, self.vocab_size), rng.integers(1, 8)
        t = np.arange(self.seq_length + 1)
        tokens = (a + b * t) % self.vocab_size
        noise = rng.random(self.seq_length + 1) < 0.1
        tokens[noise] = rng.integers(0, self.vocab_size, noise.sum())
        return {"tokens": tokens.astype(np.int64)}
