"""T5 samples: span corruption (the T5 paper's objective) over GPT-style token windows.

Why GPT windows: span corruption needs only a stretch of text, so the windows come from the same cached
document/sample/shuffle indexes as GPT (:class:`~mwb.core.data.gpt.GPTDataset`, documents concatenated in
a shuffled order), which also makes T5 work on document- and sentence-level data alike.

For a window of ``raw`` tokens: ``round(raw * noise_density)`` tokens (15%) are noise, grouped into
``round(noise / mean_span)`` spans (mean length 3); the noise and non-noise token counts are each split at
random into that many non-empty runs, interleaved starting with non-noise. ``raw`` is the largest length
whose encoder input fits ``seq_length``. The encoder sees the text with every noise span replaced by the
next sentinel (``<extra_id_0>``, ``<extra_id_1>``, …) and an EOS appended; the decoder predicts each
sentinel followed by the span it hid, then EOS; its input is the same shifted right behind BOS.

Keys of ``T5Dataset[i]`` (all ``int64``): ``enc_tokens`` [seq_length], ``enc_padding_mask`` [seq_length]
(1 = real), ``dec_tokens`` [dec_len], ``labels`` [dec_len] (-1 on padding, as Megatron), ``loss_mask`` [dec_len]
(1 where a label counts), ``dec_padding_mask`` [dec_len]; ``dec_len`` is ``dataset.decoder_seq_length``. EOS is the
tokenizer's ``eos`` (else ``eod``/``sep``), BOS its ``bos`` (else ``cls``/``eod``); padding uses ``pad``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from mwb.core.errors import DataError

from .gpt import GPTDataset
from .indexed import IndexedDataset


def span_counts(raw: int, noise_density: float = 0.15, mean_span: float = 3.0) -> tuple[int, int]:
    """(noise tokens, spans) for a window of ``raw`` tokens; at least one of each, room for the rest."""
    noise = min(max(int(round(raw * noise_density)), 1), raw - 1)
    spans = min(max(int(round(noise / mean_span)), 1), noise, raw - noise)
    return noise, spans


def raw_length_for(seq_length: int, noise_density: float = 0.15, mean_span: float = 3.0) -> int:
    """The longest window whose encoder input (non-noise + one sentinel per span + EOS) fits."""
    raw = seq_length
    while True:
        noise, spans = span_counts(raw + 1, noise_density, mean_span)
        if raw + 1 - noise + spans + 1 > seq_length:
            return raw
        raw += 1


def noise_mask(raw: int, rng, noise_density: float = 0.15, mean_span: float = 3.0) -> np.ndarray:
    """Boolean mask of the noise tokens of a ``raw``-token window (see the module docstring)."""
    noise, spans = span_counts(raw, noise_density, mean_span)

    def partition(total, parts):  # ``parts`` random positive integers summing to ``total``
        cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False)) if parts > 1 else []
        return np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)

    noise_runs, keep_runs = partition(noise, spans), partition(raw - noise, spans)
    runs = np.stack([keep_runs, noise_runs], axis=1).reshape(-1)
    flags = np.tile([False, True], spans)
    return np.repeat(flags, runs)


def end_and_start_ids(tokenizer) -> tuple[Optional[int], Optional[int]]:
    """(end, decoder start) token ids as T5 data uses them: ``eos`` (else ``eod``/``sep``/``pad``) and ``bos``
    (else ``cls``/``eod``/``pad``); None where the tokenizer has none. Training samples, fine-tuning samples and
    generation all take them from here, so a model decodes from what it was trained on."""
    def first(*roles):  # getattr: duck-typed tokenizers may lack some roles
        return next((x for x in (getattr(tokenizer, r, None) for r in roles) if x is not None), None)
    return first("eos", "eod", "sep", "pad"), first("bos", "cls", "eod", "pad")


class T5Dataset:
    """Map-style T5 span-corruption samples over documents ``doc_range`` of ``indexed``."""

    kind = "t5"

    def __init__(self, indexed: IndexedDataset, doc_range: tuple[int, int], seq_length: int, num_samples: int,
                 seed: int, tokenizer, cache_dir: Optional[str] = None, name: str = "train",
                 noise_density: float = 0.15, mean_span: float = 3.0):
        tokenizer.require("pad", purpose="T5")
        self.seq_length, self.seed, self.name = int(seq_length), int(seed), name
        self.noise_density, self.mean_span = noise_density, mean_span
        self.raw_length = raw_length_for(self.seq_length, noise_density, mean_span)
        if self.raw_length < 4:
            raise DataError(f"--seq-length {seq_length} is too short for T5 samples")
        noise, spans = span_counts(self.raw_length, noise_density, mean_span)
        self.sentinels = np.asarray(tokenizer.sentinel_ids(spans), dtype=np.int64)
        # padded up to a multiple of 8 so sequence parallelism (tp ≤ 8) can split the decoder too; the padding
        # is masked out of attention and loss, so losses are unchanged
        self.decoder_seq_length = -(-(noise + spans + 1) // 8) * 8
        self.pad = tokenizer.pad
        self.eos, self.bos = end_and_start_ids(tokenizer)
        self.windows = GPTDataset(indexed, doc_range, self.raw_length - 1, num_samples, seed, cache_dir, name)
        self.cache_reused = self.windows.cache_reused

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict:
        raw = self.windows[i]["tokens"]
        rng = np.random.RandomState((self.seed + i) % 2**32)
        mask = noise_mask(len(raw), rng, self.noise_density, self.mean_span)
        starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))  # first token of each span
        span_id = np.cumsum(np.isin(np.arange(len(raw)), starts)) - 1
        # encoder: keep non-noise, put the span's sentinel where each span starts
        enc_keep = ~mask
        enc_keep[starts] = True
        enc = np.where(mask, self.sentinels[span_id.clip(0)], raw)[enc_keep]
        enc = np.concatenate([enc, [self.eos]])
        # decoder target: for each span, its sentinel then its tokens
        dec_keep = mask.copy()
        labels = raw[dec_keep]
        sent_pos = np.searchsorted(np.flatnonzero(dec_keep), starts)
        labels = np.insert(labels, sent_pos, self.sentinels[: len(starts)])
        labels = np.concatenate([labels, [self.eos]])
        dec = np.concatenate([[self.bos], labels[:-1]])
        return {
            "enc_tokens": self._pad(enc, self.seq_length, self.pad),
            "enc_padding_mask": self._pad(np.ones(len(enc), np.int64), self.seq_length, 0),
            "dec_tokens": self._pad(dec, self.decoder_seq_length, self.pad),
            "labels": self._pad(labels, self.decoder_seq_length, -1),
            "loss_mask": self._pad(np.ones(len(labels), np.int64), self.decoder_seq_length, 0),
            "dec_padding_mask": self._pad(np.ones(len(dec), np.int64), self.decoder_seq_length, 0),
        }

    @staticmethod
    def _pad(x, n: int, value: int) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        if len(x) > n:
            raise AssertionError(f"T5 sample of {len(x)} tokens exceeds {n}")
        return np.concatenate([x, np.full(n - len(x), value, dtype=np.int64)])
