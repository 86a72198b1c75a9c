"""Deterministic, learnable BERT and T5 samples for tests and smoke runs (no files, no tokenizer).

Like :class:`mwb.core.training.batches.SyntheticTokens`, sample ``i`` is built from a generator seeded by
(seed, i), so every rank computes the same sample with no communication. The text is an arithmetic
progression over the ordinary ids, which a model can learn to fill in (masked LM, span corruption) and
whose direction reveals a swapped sentence order. The samples have the exact keys, dtypes and conventions
of the real BERT and T5 datasets in :mod:`mwb.core.data`, including padding.
"""
from __future__ import annotations

import numpy as np


class SyntheticBert:
    """``{"tokens","types","labels","loss_mask","padding_mask","is_random"}``, int64, length ``seq_length``.

    Ids 0–3 are [PAD], [CLS], [SEP], [MASK]. A sample is ``[CLS] A [SEP] B [SEP]`` then padding, or with
    ``is_random = 1`` the two segments swapped (sentence order). ~15% of the text tokens are selected
    (at least one): 80% become [MASK], 10% a random id, 10% stay; ``labels`` hold the original ids there
    (-1 elsewhere) and ``loss_mask`` is 1 there.
    """

    PAD, CLS, SEP, MASK = 0, 1, 2, 3

    def __init__(self, vocab_size: int, seq_length: int, num_samples: int = 10**9, seed: int = 0,
                 mask_prob: float = 0.15) -> None:
        if vocab_size < 8 or seq_length < 8:
            raise ValueError("SyntheticBert needs vocab_size >= 8 and seq_length >= 8")
        self.vocab_size, self.seq_length, self.num_samples = vocab_size, seq_length, num_samples
        self.seed, self.mask_prob = seed, mask_prob

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, int(i)])
        s, first = self.seq_length, 4
        length = int(rng.integers(s // 2, s + 1))  # real tokens, incl. [CLS] and two [SEP]
        n_text = length - 3
        text = first + (rng.integers(0, 1000) + rng.integers(1, 5) * np.arange(n_text)) % (self.vocab_size - first)
        cut = int(rng.integers(1, n_text))
        a, b = text[:cut], text[cut:]
        swapped = int(rng.random() < 0.5)
        if swapped:
            a, b = b, a
        tokens = np.full(s, self.PAD, dtype=np.int64)
        types = np.zeros(s, dtype=np.int64)
        seq = np.concatenate([[self.CLS], a, [self.SEP], b, [self.SEP]])
        tokens[:length] = seq
        types[len(a) + 2:length] = 1
        is_text = np.zeros(s, dtype=bool)
        is_text[1:len(a) + 1] = True
        is_text[len(a) + 2:length - 1] = True
        chosen = is_text & (rng.random(s) < self.mask_prob)
        if not chosen.any():
            chosen[rng.choice(np.flatnonzero(is_text))] = True
        labels = np.where(chosen, tokens, -1).astype(np.int64)
        action = rng.random(s)
        tokens = np.where(chosen & (action < 0.8), self.MASK, tokens)
        randoms = rng.integers(first, self.vocab_size, s)
        tokens = np.where(chosen & (action >= 0.8) & (action < 0.9), randoms, tokens)
        padding = np.zeros(s, dtype=np.int64)
        padding[:length] = 1
        return {"tokens": tokens.astype(np.int64), "types": types, "labels": labels,
                "loss_mask": chosen.astype(np.int64), "padding_mask": padding,
                "is_random": np.int64(swapped)}


class SyntheticT5:
    """``{"enc_tokens","dec_tokens","labels","loss_mask","enc_padding_mask","dec_padding_mask"}``.

    Ids 0–2 are [PAD], [BOS], [EOS]; the last ``num_sentinels`` ids are the span sentinels (T5's
    ``<extra_id_k>`` counting down from the top of the vocabulary). Some spans of the text are each
    replaced by one sentinel in the encoder input; the target is ``sentinel_k span_k …``; the decoder reads
    ``[BOS] + target`` and predicts ``target + [EOS]`` (Megatron's convention). Encoder length
    ``seq_length``, decoder length ``dec_length`` (default ``seq_length // 2``), both padded.
    """

    PAD, BOS, EOS = 0, 1, 2

    def __init__(self, vocab_size: int, seq_length: int, dec_length: int | None = None,
                 num_samples: int = 10**9, seed: int = 0, num_sentinels: int = 8) -> None:
        dec_length = dec_length or seq_length // 2
        if vocab_size < num_sentinels + 8 or seq_length < 8 or dec_length < 4:
            raise ValueError("SyntheticT5 needs vocab_size >= num_sentinels + 8, seq_length >= 8, dec_length >= 4")
        self.vocab_size, self.seq_length, self.dec_length = vocab_size, seq_length, dec_length
        self.num_samples, self.seed, self.num_sentinels = num_samples, seed, num_sentinels

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, int(i)])
        first, last = 3, self.vocab_size - self.num_sentinels  # ordinary ids: [first, last)
        n = int(rng.integers(self.seq_length // 2, self.seq_length + 1))
        text = first + (rng.integers(0, 1000) + rng.integers(1, 5) * np.arange(n)) % (last - first)
        # spans: one per region of the text, while the target (sentinel + span each, then EOS) fits
        k_max = min(self.num_sentinels, max(1, (self.dec_length - 1) // 3), n // 4)
        k = int(rng.integers(1, k_max + 1))
        region = n // k
        spans, budget = [], self.dec_length - 1
        for r in range(k):
            room = min(3, region - 1, budget - 1)
            if room < 1:
                break
            ln = int(rng.integers(1, room + 1))
            start = r * region + int(rng.integers(0, region - ln + 1))
            spans.append((start, ln))
            budget -= ln + 1
        enc, target, pos = [], [], 0
        for k_i, (start, ln) in enumerate(spans):
            sentinel = self.vocab_size - 1 - k_i
            enc.extend(text[pos:start])
            enc.append(sentinel)
            target.append(sentinel)
            target.extend(text[start:start + ln])
            pos = start + ln
        enc.extend(text[pos:])
        dec_in = [self.BOS] + target
        labels = target + [self.EOS]
        return {"enc_tokens": _pad(enc, self.seq_length, self.PAD),
                "dec_tokens": _pad(dec_in, self.dec_length, self.PAD),
                "labels": _pad(labels, self.dec_length, -1),
                "loss_mask": _pad([1] * len(labels), self.dec_length, 0),
                "enc_padding_mask": _pad([1] * len(enc), self.seq_length, 0),
                "dec_padding_mask": _pad([1] * len(dec_in), self.dec_length, 0)}


def _pad(values, length: int, fill: int) -> np.ndarray:
    out = np.full(length, fill, dtype=np.int64)
    out[:len(values)] = values
    return out
