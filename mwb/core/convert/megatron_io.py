"""A Megatron checkpoint → an mwb checkpoint directory, with the released vocabulary beside it.

The reader (:mod:`.megatron_legacy`) gives full tensors and the mwb model config; this module finds the
tokenizer the checkpoint was trained with, takes the true vocabulary size from it and writes the mwb
checkpoint. Megatron records its vocabulary as paths of the training machine (``args.vocab_file``,
``args.merge_file``), so the files are looked for under those names in the checkpoint's own directories (the
save directory, the ``iter_*``/``release`` directory, the save directory's ``tokenizer/`` that
``mwb convert --to megatron`` writes, and the save directory's parent), then at the recorded path itself. A
BERT ``vocab.txt`` gets a ``tokenizer_config.json`` saying ``do_lower_case`` as the checkpoint's
``tokenizer_type`` says (``BertWordPieceLowerCase`` / ``BertWordPieceCase``), so the mwb tokenizer lower-cases
exactly when Megatron did, whatever the vocabulary looks like.

True vocabulary size: a GPT-2 ``vocab.json``'s entries, a WordPiece ``vocab.txt``'s lines (Megatron's BERT
tokenizer adds ``[BOS]``/``[EOS]`` after them, unused by BERT, which fall in the dropped padding). The
converted checkpoint's ``vocab_size`` is that size and its embedding (and head) rows stop there; a tokenizer
larger than the embedding is refused.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Optional

from ..atomic import atomic_write_json
from ..checkpoint.writer import write_model_checkpoint
from ..config import RunConfig, update
from . import megatron_dist, megatron_legacy
from .megatron_args import check_shapes


def _candidates(src: str, d: str, name: Optional[str]) -> list[str]:
    if not name:
        return []
    base = os.path.basename(str(name))
    dirs = [src, d, os.path.join(src, "tokenizer"), os.path.dirname(os.path.abspath(src))]
    return [os.path.join(x, base) for x in dirs] + [str(name)]


def _first(paths: list[str]) -> Optional[str]:
    return next((p for p in paths if os.path.isfile(p)), None)


def find_tokenizer(src: str, args) -> tuple[Optional[list[str]], Optional[int], Optional[bool]]:
    """(tokenizer files, true vocabulary size, lower-case) of the checkpoint at ``src``; Nones when absent."""
    d = megatron_legacy.checkpoint_dir(src)
    kind = str(getattr(args, "tokenizer_type", "") or "")
    vocab = _first(_candidates(src, d, getattr(args, "vocab_file", None)))
    if kind.startswith("BertWordPiece") or (vocab and vocab.endswith(".txt")):
        vocab = vocab or _first([os.path.join(x, "vocab.txt") for x in (src, d, os.path.join(src, "tokenizer"))])
        if vocab is None:
            return None, None, None
        with open(vocab, encoding="utf-8") as f:
            size = sum(1 for _ in f)
        lower = kind != "BertWordPieceCase" if kind.startswith("BertWordPiece") else None
        return [vocab], size, lower
    merges = _first(_candidates(src, d, getattr(args, "merge_file", None)))
    if vocab is None:
        where = (src, d, os.path.join(src, "tokenizer"))
        vocab = _first([os.path.join(x, "vocab.json") for x in where])
        merges = merges or _first([os.path.join(x, "merges.txt") for x in where])
    if vocab is None or merges is None:
        return None, None, None
    with open(vocab, encoding="utf-8") as f:
        size = len(json.load(f))
    return [vocab, merges], size, None


def _stage_tokenizer(files: list[str], lower: Optional[bool], tmp: str) -> list[str]:
    """The tokenizer files under their standard names (``vocab.json``/``merges.txt``/``vocab.txt``) in
    ``tmp``, with the lower-casing recorded for a WordPiece vocabulary."""
    out = []
    for f in files:
        name = "vocab.txt" if len(files) == 1 else ("vocab.json" if f == files[0] else "merges.txt")
        shutil.copyfile(f, os.path.join(tmp, name))
        out.append(os.path.join(tmp, name))
    if lower is not None:
        atomic_write_json(os.path.join(tmp, "tokenizer_config.json"), {"do_lower_case": lower})
        out.append(os.path.join(tmp, "tokenizer_config.json"))
    return out


def megatron_to_mwb(src: str, dst: str, overwrite: bool = False) -> tuple[str, str]:
    """Megatron-LM legacy, megatron-core ``torch`` or ``torch_dist`` checkpoint → mwb checkpoint directory;
    returns (dst, family name)."""
    src = os.path.abspath(src)
    d = megatron_legacy.checkpoint_dir(src)
    dist = megatron_dist.is_dist(src)
    if dist:
        args = megatron_dist.common_args(src)
    else:
        args = megatron_legacy._load(megatron_legacy._shard_file(d, 0, 0, megatron_legacy.pp_of_names(d))).get("args")
    files, size, lower = find_tokenizer(src, args) if args is not None else (None, None, None)
    m, vocab, tensors, _ = (megatron_dist if dist else megatron_legacy).read(src, vocab_size=size)
    cfg = update(RunConfig(), {"model": m})
    check_shapes(cfg.model, vocab, tensors, src)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=None))
    with tempfile.TemporaryDirectory(prefix="mwb-megatron-tok-") as tmp:
        extra = {"tokenizer": _stage_tokenizer(files, lower, tmp)} if files else {}
        write_model_checkpoint(dst, cfg, vocab, tensors, extra_files=extra, overwrite=overwrite)
    return os.path.abspath(dst), f"megatron-{m['arch']}"


def is_megatron(path: str) -> bool:
    """Any checkpoint :func:`megatron_to_mwb` reads."""
    return megatron_dist.is_dist(path) or megatron_legacy.is_legacy(path)

