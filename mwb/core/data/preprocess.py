"""Tokenize documents into Megatron indexed datasets (the logic behind ``mwb preprocess``).

For every ``--json-keys`` key, writes ``{output_prefix}_{key}_document.bin/.idx`` (one sequence per
document) or, with ``split_sentences``, ``{output_prefix}_{key}_sentence.bin/.idx`` (one sequence per
sentence, documents as document boundaries) — Megatron's naming and layout. ``append_eod`` adds the
tokenizer's end-of-document id after each non-empty document (after its last sentence).

Why the pipeline looks like this: the main process only reads lines (:mod:`.readers`) and writes tokens;
``workers`` spawned processes parse and tokenize chunks of documents. At most a few chunks per worker are
in flight, so memory stays flat on any input size, and results are consumed in submission order, so the
output is byte-identical for any number of workers. Writers write to temporary names and rename on
success only: a malformed record (a :class:`~mwb.core.errors.DataError` naming ``file:line``) or a crash
leaves earlier outputs under the final names untouched. With ``skip_bad`` malformed records are skipped
and counted instead.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np

from mwb.core.errors import DataError

from .indexed import IndexedDatasetWriter, best_dtype
from .readers import Item, detect_format, iter_items, parse_item
from .sentences import split_sentences


@dataclass
class PreprocessResult:
    """What :func:`preprocess` wrote: ``outputs`` maps each key to its dataset prefix."""

    outputs: dict
    documents: int = 0
    sequences: int = 0
    tokens: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: int = 0
    errors: list = field(default_factory=list)  # the first few skipped records' messages

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / max(self.seconds, 1e-9)


class _Encoder:
    """Per-process state: the tokenizer and the options. One per worker (built by ``_init_worker``)."""

    def __init__(self, tokenizer, keys, append_eod, split):
        from mwb.core.tokenizers import load_tokenizer

        self.tok = load_tokenizer(tokenizer)
        self.keys = list(keys)
        self.split = split
        self.eod = None
        if append_eod:
            self.tok.require("eod", purpose="--append-eod")
            self.eod = self.tok.eod

    def encode_chunk(self, items: Sequence[Item]):
        """[(nbytes, error or None, {key: (tokens, sequence lengths)})] for each item, in order."""
        parsed, texts, pieces_of = [], [], []
        for item in items:
            try:
                rec = parse_item(item, self.keys)
            except DataError as e:
                parsed.append(str(e))
                continue
            parsed.append(rec)
            for k in self.keys:
                pieces = split_sentences(rec[k]) if self.split else ([rec[k]] if rec[k] else [])
                pieces_of.append(len(pieces))
                texts.extend(pieces)
        ids = self.tok.encode_batch(texts) if texts else []
        out, t, p = [], 0, 0
        for item, rec in zip(items, parsed):
            if isinstance(rec, str):
                out.append((item.nbytes, rec, None))
                continue
            docs = {}
            for k in self.keys:
                seqs = [s for s in ids[t:t + pieces_of[p]] if len(s)]
                t += pieces_of[p]
                p += 1
                lengths = [len(s) for s in seqs]
                if seqs and self.eod is not None:
                    seqs.append([self.eod])
                    lengths[-1] += 1
                flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=sum(lengths))
                docs[k] = (flat, lengths)
            out.append((item.nbytes, None, docs))
        return out


_WORKER: Optional[_Encoder] = None


def _init_worker(tokenizer, keys, append_eod, split) -> None:
    # one tokenizer thread per worker: the pool is the parallelism, oversubscribing 2 cores only hurts
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    global _WORKER
    _WORKER = _Encoder(tokenizer, keys, append_eod, split)


def _encode_in_worker(items):
    return _WORKER.encode_chunk(items)


def _chunks(items: Iterable[Item], size: int, max_bytes: int = 1 << 20) -> Iterator[list]:
    chunk, nbytes = [], 0
    for item in items:
        chunk.append(item)
        nbytes += item.nbytes
        if len(chunk) >= size or nbytes >= max_bytes:
            yield chunk
            chunk, nbytes = [], 0
    if chunk:
        yield chunk


def _results(chunks: Iterator[list], workers: int, init_args) -> Iterator[list]:
    """Encoded chunks in input order; a bounded window of pending chunks keeps memory flat."""
    if workers <= 1:
        enc = _Encoder(*init_args)
        for chunk in chunks:
            yield enc.encode_chunk(chunk)
        return
    import multiprocessing as mp

    # spawn, not fork: the parent may hold tokenizers' or torch's threads, which fork would corrupt
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(workers, initializer=_init_worker, initargs=init_args)
    try:
        window: collections.deque = collections.deque()
        for chunk in chunks:
            window.append(pool.apply_async(_encode_in_worker, (chunk,)))
            if len(window) >= 4 * workers:
                yield window.popleft().get()
        while window:
            yield window.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def output_prefix_for(output_prefix: str, key: str, split_sentences: bool) -> str:
    return f"{output_prefix}_{key}_{'sentence' if split_sentences else 'document'}"


def preprocess(
    inputs: Sequence[str],
    output_prefix: str,
    tokenizer,
    json_keys: Sequence[str] = ("text",),
    workers: int = 1,
    append_eod: bool = False,
    split_sentences: bool = False,
    skip_bad: bool = False,
    text_docs: str = "line",
    chunk_size: int = 256,
    progress: Optional[bool] = None,
    max_docs: Optional[int] = None,
) -> PreprocessResult:
    """Tokenize ``inputs`` into one indexed dataset per key; see the module docstring. ``max_docs`` reads only
    the first that many documents (records) of the inputs, in order: a fixed slice of a large corpus.

    ``tokenizer`` is a path (what ``--tokenizer`` takes) or a loaded :class:`~mwb.core.tokenizers.Tokenizer`
    (its ``path`` is reloaded in workers). ``progress=None`` shows a tqdm bar only when stderr is a TTY.
    """
    from mwb.core.tokenizers import load_tokenizer

    inputs = [str(p) for p in inputs]
    keys = list(json_keys) or ["text"]
    if not inputs:
        raise DataError("no input files (give --input FILE)")
    if max_docs is not None and max_docs < 1:
        raise DataError(f"max_docs must be at least 1, got {max_docs}")
    if len(set(keys)) != len(keys):
        raise DataError(f"--json-keys has duplicates: {' '.join(keys)}")
    for p in inputs:
        if not os.path.isfile(p):
            raise DataError(f"input file not found: {p}")
        if detect_format(p) == "text" and len(keys) > 1:
            raise DataError(f"{p}: a plain-text input has one text per document; give a single --json-keys")
    tok = load_tokenizer(tokenizer)
    if append_eod:
        tok.require("eod", purpose="--append-eod")
    # workers reload the tokenizer from its path; in-process the loaded one is reused
    tok_arg = tok.path if workers > 1 else tok
    dtype = best_dtype(tok.vocab_size)
    outputs = {k: output_prefix_for(output_prefix, k, split_sentences) for k in keys}
    result = PreprocessResult(outputs=outputs)

    from tqdm import tqdm

    start = time.perf_counter()
    writers = {k: IndexedDatasetWriter(prefix, dtype) for k, prefix in outputs.items()}
    bar = tqdm(unit="doc", file=sys.stderr, disable=(not sys.stderr.isatty()) if progress is None else not progress,
               desc="preprocess", dynamic_ncols=True, mininterval=0.5)
    try:
        items = iter_items(inputs, keys, text_docs)
        if max_docs is not None:
            items = itertools.islice(items, max_docs)
        init_args = (tok_arg, keys, append_eod, split_sentences)
        results = contextlib.closing(_results(_chunks(items, chunk_size), max(1, int(workers)), init_args))
        with results as encoded_chunks:  # closing stops the worker pool at once on an error
            for encoded in encoded_chunks:
                done = 0
                for nbytes, err, docs in encoded:
                    result.bytes += nbytes
                    if err is not None:
                        if not skip_bad:
                            raise DataError(f"{err} (pass --skip-bad to skip such records)")
                        result.skipped += 1
                        if len(result.errors) < 5:
                            result.errors.append(err)
                        continue
                    for k, (flat, lengths) in docs.items():
                        writers[k].add_document(flat, lengths)
                        result.sequences += len(lengths)
                        result.tokens += len(flat)
                    result.documents += 1
                    done += 1
                elapsed = time.perf_counter() - start
                bar.update(done)
                bar.set_postfix_str(f"{result.bytes / 1e6 / max(elapsed, 1e-9):.1f} MB/s", refresh=False)
        for w in writers.values():
            w.finalize()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    finally:
        bar.close()
    result.seconds = time.perf_counter() - start
    return result
