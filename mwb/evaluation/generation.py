"""Text generation from a causal LM: greedy, temperature, top-k and top-p (nucleus) sampling with a
preallocated KV cache and continuous batching, stop strings, token budgets, seeds, ``n`` samples per prompt
and per-token log-probabilities. :func:`generate` is the one entry point (``mwb generate``, every generation
task, and — through the serving engine, :mod:`.engine` — ``mwb serve``).

Design choices, and why:
* **Continuous batching on a preallocated cache** (:mod:`.batcher`, :mod:`mwb.core.models.kv_cache`). Up to
  ``batch_size`` rows decode together; each row holds only its own keys and values (per-row lengths, no pad
  in the cache), written in place, and attends under a mask that shows it its own positions (from 0 at its
  first real token), so a row computes what it computes alone, with rotary and learned positions alike.
  Prompts longest first; when a row ends it leaves the batch at once and the next prompt joins.
* **Each row stops on its own** (end of document, a stop string, ``max_tokens``, or the model's context).
* **Per-row random streams.** Row ``r`` (prompt ``i``, sample ``j`` of ``n``: ``r = i·n + j``) samples with
  its own generator seeded from ``(seed, r)``. A completion therefore depends only on the seed, its prompt
  and its row number — not on ``batch_size`` nor on which other prompts share its batch — so batch 16 and
  batch 1 draw the same tokens, and the ``n`` samples of one prompt are independent streams.
* **Reported log-probabilities are the model's own** (log-softmax of the raw logits, temperature 1, before
  top-k/top-p), as the OpenAI completions API and lm-evaluation-harness expect; sampling settings change
  which token is chosen, never the number reported for it.
* **The reference** (``use_cache=False``): the prompts of a batch left-padded and recomputed in full at every
  step, with no cache at all — what the cache is tested against. Beam search keeps left-padded batches
  (its beams are reordered every step) on the same preallocated cache.
* **Mixture-of-experts models** with a finite capacity factor drop tokens depending on what else is in
  the batch (pads included), so only with enough capacity is their batched output the batch-1 output.
* **Tensor parallelism**: :class:`~mwb.evaluation.lm.LanguageModel` gathers the vocab-sharded logits, so
  every TP rank holds bitwise the same logits; the seed is broadcast from TP rank 0, so every rank draws
  the same tokens from its own generators and no per-token broadcast is needed.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F

from mwb.core.models.kv_cache import PreallocatedKVCache

from .batcher import ContinuousBatcher
from .beam_search import PromptBeams, ban_repeats, run_beams
from .sampling import (Generation, SamplingParams, _accept, _echo, _prompt_row, _Row, _shared_seed,  # noqa: F401
                       beam_outputs, filter_logits, row_generator, sample_tokens, stop_check)

__all__ = ["Generation", "SamplingParams", "beam_generate", "filter_logits", "generate", "row_generator",
           "sample_tokens"]


class _PaddedBatch:
    """Left-padded contexts in the model: tokens, key-padding mask, per-row positions and the KV cache, kept
    in step as rows leave (or, in beam search, are copied) and tokens are appended. Without a cache every
    step recomputes the whole padded batch (the reference)."""

    def __init__(self, lm, contexts: list[list[int]], use_cache: bool) -> None:
        width = max(len(c) for c in contexts)
        pads = torch.tensor([width - len(c) for c in contexts])
        self.lm, self.pads, self.counts = lm, pads, [len(c) for c in contexts]
        self.tokens = torch.tensor([[0] * (width - len(c)) + c for c in contexts], dtype=torch.long)
        self.padded = bool(pads.any())
        self.key_mask = torch.arange(width)[None, :] >= pads[:, None]  # [b, width]: true at real tokens
        self.positions = (torch.arange(width)[None, :] - pads[:, None]).clamp(min=0)
        self.cache = PreallocatedKVCache(len(contexts)) if use_cache else None

    def _cached(self, tokens: torch.Tensor, counts: list[int], last_only: bool) -> torch.Tensor:
        positions = self.cache.begin(0, counts, tokens.size(1))
        logits = self.lm.logits(tokens, cache=self.cache, position_ids=positions, last_only=last_only)
        self.cache.commit()
        return logits

    def _full(self, last_only: bool) -> torch.Tensor:
        return self.lm.logits(self.tokens, position_ids=self.positions if self.padded else None,
                              attention_mask=self.key_mask if self.padded else None, last_only=last_only)

    def prefill(self, last_only: bool = True) -> torch.Tensor:
        if self.cache is None:
            return self._full(last_only)
        return self._cached(self.tokens, self.counts, last_only)

    def keep(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx`` (in that order; a repeated row is copied, cache included)."""
        self.tokens, self.key_mask, self.positions = self.tokens[idx], self.key_mask[idx], self.positions[idx]
        if self.cache is not None:
            self.cache.reorder(idx)

    def extend(self, new: torch.Tensor) -> torch.Tensor:
        """Append ``new [b, 1]`` to every row; the next-token logits ``[b, vocab]``."""
        self.tokens = torch.cat([self.tokens, new], dim=1)
        self.positions = torch.cat([self.positions, self.positions[:, -1:] + 1], dim=1)
        self.key_mask = torch.cat([self.key_mask, torch.ones_like(new, dtype=torch.bool)], dim=1)
        if self.cache is None:
            return self._full(last_only=True)[:, -1]
        return self._cached(new, [1] * new.size(0), last_only=True)[:, -1]


@torch.no_grad()
def _reference_batch(lm, rows: list[_Row], params: SamplingParams, echo_logprobs: bool,
                     on_token: Optional[Callable[[int, Generation], None]] = None) -> None:
    """Extend every row of one left-padded batch until each is done, recomputing the batch in full at every
    step (``use_cache=False``: the reference the cached, continuously batched path is tested against)."""
    batch = _PaddedBatch(lm, [r.context for r in rows], use_cache=False)
    logits = batch.prefill(last_only=not echo_logprobs)
    if echo_logprobs:
        for i, r in enumerate(rows):
            _echo(r.out, logits[i, int(batch.pads[i]):], params.top_logprobs)
    last = logits[:, -1]
    stops = [s for s in params.stop if s]
    active = list(rows)
    for step in range(params.max_tokens):
        allowed = ban_repeats(last, [r.out.tokens for r in active], params.no_repeat_ngram_size)
        picked = sample_tokens(allowed, params, [r.generator for r in active])
        logp = F.log_softmax(last, dim=-1)
        for k, r in enumerate(active):
            _accept(r, picked[k], logp[k], lm, params, stops, step + 1 == params.max_tokens)
            if on_token is not None:
                on_token(r.index, r.out)
        keep = [k for k, r in enumerate(active) if not r.done]
        if not keep:
            break
        if len(keep) < len(active):
            batch.keep(torch.tensor(keep))
            active = [active[k] for k in keep]
        last = batch.extend(torch.tensor([[r.out.tokens[-1]] for r in active], dtype=torch.long))


@torch.no_grad()
def _beam_batch(lm, outs: list[Generation], contexts: list[list[int]], params: SamplingParams,
                echo_logprobs: bool) -> list[list[Generation]]:
    """Beam search for the prompts of one left-padded batch (``num_beams`` rows each); ``params.n`` best each."""
    batch = _PaddedBatch(lm, contexts, params.use_cache)
    logits = batch.prefill(last_only=not echo_logprobs)
    if echo_logprobs:
        for i, out in enumerate(outs):
            _echo(out, logits[i, int(batch.pads[i]):], params.top_logprobs)
    stops = [s for s in params.stop if s]
    beams = [PromptBeams(params.num_beams, min(params.max_tokens, lm.max_length - len(c) + 1),
                         params.length_penalty, params.no_repeat_ngram_size,
                         lm.eod if params.stop_at_eod else None, stop_check(lm, stops), top_n=params.top_logprobs)
             for c in contexts]

    def advance(rows: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        batch.keep(rows)
        return batch.extend(new)

    run_beams(beams, logits[:, -1], advance)
    return [beam_outputs(lm, out, b, params.n, stops) for out, b in zip(outs, beams)]



def generate(lm, prompts: Union[str, Sequence[Union[str, Sequence[int]]]],
             params: Optional[SamplingParams] = None, batch_size: int = 16,
             echo_logprobs: bool = False,
             on_token: Optional[Callable[[int, Generation], None]] = None) -> list[Generation]:
    """Complete each prompt (text or token ids) ``params.n`` times, ``batch_size`` rows at a time.

    Returns ``len(prompts) · n`` generations, prompt-major (prompt ``i``'s samples are ``i·n … i·n+n-1``).
    The same seed and prompts give the same completions on every run, every TP rank and every
    ``batch_size`` (see the module docstring). ``echo_logprobs`` also scores the prompts' own tokens.
    ``on_token(i, generation)`` is called after each decoding step of completion ``i`` (its tokens so far;
    ``finish_reason`` is final once the row is done)."""
    params = params or SamplingParams()
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if isinstance(prompts, str):
        prompts = [prompts]
    if params.beam:
        return beam_generate(lm, prompts, params, batch_size, echo_logprobs)
    groups = prompt_rows(lm, prompts, params)
    rows = [r for g in groups for r in g]
    if params.max_tokens == 0 and not echo_logprobs:
        return [r.out for r in rows]
    order = sorted(groups, key=lambda g: -len(g[0].context))  # longest first: similar lengths decode together
    if not params.use_cache:
        flat = [r for g in order for r in g]
        for start in range(0, len(flat), batch_size):
            _reference_batch(lm, flat[start:start + batch_size], params, echo_logprobs, on_token)
        return [r.out for r in rows]
    report = None if on_token is None else (lambda seq: on_token(seq.row.index, seq.row.out))
    batcher = ContinuousBatcher(lm, max_rows=batch_size, on_token=report)
    for group in order:
        batcher.add(group, params, echo=echo_logprobs)
    batcher.run()
    return [r.out for r in rows]


def prompt_rows(lm, prompts: Sequence[Union[str, Sequence[int]]], params: SamplingParams,
                seed: Optional[int] = None) -> list[list[_Row]]:
    """The rows of each prompt (``params.n`` each, numbered prompt-major from 0), with their random streams:
    from ``seed`` when given (the engine draws it once per request), else from ``params.seed`` (or one drawn
    and shared over TP ranks)."""
    if seed is None and not params.greedy:
        seed = _shared_seed(lm, params.seed)
    groups, count = [], 0
    for prompt in prompts:
        out, context = _prompt_row(lm, prompt)
        group = []
        for j in range(params.n):
            gen = None if params.greedy else row_generator(seed, count, lm.device)
            copy = out if j == 0 else Generation(prompt=out.prompt, prompt_tokens=list(out.prompt_tokens))
            group.append(_Row(copy, context, gen, index=count))
            count += 1
        groups.append(group)
    return groups


def beam_generate(lm, prompts: Sequence[Union[str, Sequence[int]]], params: SamplingParams, batch_size: int = 16,
                  echo_logprobs: bool = False) -> list[Generation]:
    """Beam search (what :func:`generate` runs when ``num_beams`` > 1; here ``num_beams = 1`` runs it too)
    over ``batch_size`` prompts at a time, each ``num_beams`` model rows; ``params.n`` per prompt, prompt-major."""
    first = [_prompt_row(lm, p) for p in prompts]
    results: list[list[Generation]] = [[] for _ in first]
    order = sorted(range(len(first)), key=lambda i: -len(first[i][1]))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        outs = _beam_batch(lm, [first[i][0] for i in chunk], [first[i][1] for i in chunk], params, echo_logprobs)
        for i, gens in zip(chunk, outs):
            results[i] = gens
    return [g for gens in results for g in gens]

