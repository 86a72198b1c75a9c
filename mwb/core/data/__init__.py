"""Data for pretraining: indexed datasets, GPT/BERT/T5 samples, blending, and the one entry point.

``build_datasets(arch, data, tokenizer, seq_length, seed, split, num_samples)`` returns the
``(train, valid, test)`` map-style datasets the trainer reads (``None`` for a split with 0 samples). Sample
``i`` of each is a dict of int64 numpy arrays:

* gpt  — ``tokens`` [seq_length + 1]
* bert — ``tokens``, ``types``, ``labels`` (-1 where not predicted), ``loss_mask``, ``padding_mask``
  [seq_length] each, and ``is_random`` [] (see :mod:`.bert`)
* t5   — ``enc_tokens``, ``enc_padding_mask`` [seq_length]; ``dec_tokens``, ``labels``, ``loss_mask``,
  ``dec_padding_mask`` [dataset.decoder_seq_length] (see :mod:`.t5`)

``data`` is Megatron's list: ``[prefix]`` or ``[w1, prefix1, w2, prefix2, ...]`` (weights may be strings);
``None`` means the bundled Shakespeare corpus (:mod:`.bundled`). Everything is deterministic from
``seed``; sample indexes are cached (:mod:`.cache`). Formats and commands: ``docs/data.md``.
"""
from __future__ import annotations

from typing import Optional, Sequence

from mwb.core.errors import DataError

from .bert import BertDataset
from .blend import BlendedDataset, samples_per_dataset
from .gpt import SPLIT_NAMES, GPTDataset, split_ranges
from .indexed import IndexedDataset, IndexedDatasetWriter, best_dtype
from .t5 import T5Dataset

ARCHS = ("gpt", "bert", "t5")
__all__ = ["ARCHS", "BertDataset", "BlendedDataset", "GPTDataset", "IndexedDataset", "IndexedDatasetWriter",
           "T5Dataset", "best_dtype", "build_datasets", "parse_data", "resolve_data"]


def _is_number(x) -> bool:
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


def parse_data(data) -> tuple[list, list]:
    """Megatron's ``--data`` list → (prefixes, weights). A single string may hold the whole list."""
    items = data.split() if isinstance(data, str) else [str(x) for x in data]
    if not items:
        raise DataError("--data is empty; give a prefix or weight/prefix pairs")
    if len(items) == 1:
        return items, [1.0]
    if len(items) % 2 == 0 and all(_is_number(w) for w in items[0::2]) and not any(map(_is_number, items[1::2])):
        return items[1::2], [float(w) for w in items[0::2]]
    if not any(map(_is_number, items)):
        return items, [1.0] * len(items)
    raise DataError(f"cannot read --data {' '.join(items)}: give PREFIX or W1 PREFIX1 W2 PREFIX2 ...")


def resolve_data(arch: str, data, tokenizer, cache_dir: Optional[str] = None):
    """(data list, Tokenizer or None) to train on: the given ones, or the bundled corpus tokenized with the
    given tokenizer (the bundled one when none is given).

    Call this first to learn the vocabulary size; ``build_datasets`` calls it too.
    """
    from mwb.core.tokenizers import Tokenizer, load_tokenizer

    if arch not in ARCHS:
        raise DataError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    if not data:
        from .bundled import default_data

        # the bundled corpus tokenized with the given tokenizer (cached per tokenizer), so ids and vocabulary agree
        given = tokenizer.path if isinstance(tokenizer, Tokenizer) else tokenizer
        prefixes, tok_path = default_data(arch, cache_dir, given)
        return prefixes, (tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tok_path))
    if tokenizer is None:
        if arch != "gpt":
            raise DataError(f"{arch} needs --tokenizer (the one the data was preprocessed with)")
        return list(data) if not isinstance(data, str) else data.split(), None
    return (list(data) if not isinstance(data, str) else data.split()), load_tokenizer(tokenizer)


def _one(arch, indexed, split, s, n, tok, seq_length, seed, cache_dir, mask_prob=0.15):
    lo, hi = split_ranges(split, indexed.num_documents)[s]
    name = SPLIT_NAMES[s]
    if hi <= lo:
        raise DataError(f"the {name} split of {indexed.prefix} is empty ({indexed.num_documents} documents, "
                        f"--split {split}); change --split or use more data")
    if arch == "gpt":
        return GPTDataset(indexed, (lo, hi), seq_length, n, seed, cache_dir, name)
    if arch == "bert":
        return BertDataset(indexed, (lo, hi), seq_length, n, seed, tok, cache_dir, name, masked_lm_prob=mask_prob)
    return T5Dataset(indexed, (lo, hi), seq_length, n, seed, tok, cache_dir, name)


def build_datasets(arch: str, data, tokenizer, seq_length: int, seed: int, split: str = "949,50,1",
                   num_samples: Sequence[int] = (0, 0, 0), cache_dir: Optional[str] = None,
                   mask_prob: float = 0.15):
    """``(train, valid, test)`` datasets for ``arch`` (see the module docstring); ``None`` where 0 samples.

    ``tokenizer`` is a :class:`~mwb.core.tokenizers.Tokenizer`, a path, or ``None`` (bundled data, or GPT).
    Each returned dataset has ``.tokenizer`` set. Raises DataError for missing ``.bin``/``.idx`` files,
    an empty split, or a tokenizer without the special tokens ``arch`` needs. ``mask_prob`` is BERT's share
    of predicted tokens.
    """
    if not 0.0 < mask_prob < 1.0:
        raise DataError(f"mask_prob must be in (0, 1), got {mask_prob}")
    data, tok = resolve_data(arch, data, tokenizer, cache_dir)
    prefixes, weights = parse_data(data)
    indexed = [IndexedDataset(p) for p in prefixes]
    counts = list(num_samples) + [0] * (3 - len(num_samples))
    out = []
    for s in range(3):
        n = int(counts[s] or 0)
        if n <= 0:
            out.append(None)
            continue
        if len(indexed) == 1:
            ds = _one(arch, indexed[0], split, s, n, tok, seq_length, seed, cache_dir, mask_prob)
        else:
            per = samples_per_dataset(weights, n)
            parts = [_one(arch, ix, split, s, k, tok, seq_length, seed, cache_dir, mask_prob) for ix, k in zip(indexed, per)]
            ds = BlendedDataset(parts, weights, n)
        ds.tokenizer = tok
        out.append(ds)
    return tuple(out)
