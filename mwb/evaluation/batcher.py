"""Continuous batching on a preallocated KV cache: sequences join the running batch at the next step, long
prompts are prefilled in chunks between decoding steps, and each row leaves as soon as it ends.

:func:`~mwb.evaluation.generation.generate` runs it to completion in the caller's thread; the serving engine
(:mod:`.engine`) steps it from its scheduler thread as requests arrive. One :meth:`ContinuousBatcher.step`:

1. **Prefill.** When no prompt is being prefilled, waiting prompts (first come, first served) enter the
   prefill region while rows, the KV-token budget and the prefill budget (``rows × longest chunk`` tokens
   per pass) allow. One pass advances every prefilling prompt by a chunk; a prompt whose last chunk is in
   draws its first token(s) and its rows join the decoding region (``n`` samples of one prompt are prefilled
   once, and the other rows copy its keys and values).
2. **Decode.** One pass over every decoding row (one token each), then each row draws its next token with
   its own sampling parameters and random stream (:func:`~.sampling.sample_mixed`).
3. **Leave.** Finished (or cancelled) rows free their slot at once: the last row of the region moves in.

Why a row's output does not depend on its batch-mates: its keys and values are its own (per-row lengths, no
padding in the cache), its attention mask hides every other position, its positions start at 0, sampling
is row-wise with its own generator. What remains is floating-point rounding of batched matrix products.

Cache slots: rows ``0 … D-1`` decode, ``D … D+P-1`` prefill, so each pass covers one contiguous range.
Everything is deterministic given the arrivals, so TP ranks that feed the same arrivals in the same steps
run the same batches (the engine broadcasts arrivals and cancellations from TP rank 0).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from mwb.core.models.kv_cache import PreallocatedKVCache

from .sampling import SamplingParams, _accept, _Row, echo_chunk, sample_mixed

UNBOUNDED = 1 << 30  # LanguageModel.max_length of a model without a position limit (rotary)


@dataclass(eq=False)  # identity: two rows with equal contents are still two rows
class Seq:
    """One row of the batch: the completion it extends, its sampling settings and where its prompt stands."""
    row: _Row
    params: SamplingParams
    stops: list[str]
    echo: bool = False
    owner: Any = None           # the request it belongs to (the engine's); None in generate()
    prefilled: int = 0          # context tokens already in the cache
    siblings: list["Seq"] = field(default_factory=list)  # the other samples of this prompt (prefilled once)

    @property
    def rows(self) -> int:
        return 1 + len(self.siblings)

    def reserve(self, max_length: int) -> int:
        """KV positions this row may come to hold."""
        return min(len(self.row.context) + self.params.max_tokens, max_length)


class ContinuousBatcher:
    """The decoding state of a stream of sequences (see the module docstring).

    ``max_rows``: rows decoded together. ``max_kv_tokens``: bound on ``rows × longest reserved length`` (the
    cache's size), ``None`` for none. ``prefill_tokens``: tokens (pads included) per prefill pass.
    ``on_token(seq)`` is called after every token a row accepts (``seq.row.done`` once it has ended)."""

    def __init__(self, lm, max_rows: int = 16, max_kv_tokens: Optional[int] = None, prefill_tokens: int = 2048,
                 on_token: Optional[Callable[[Seq], None]] = None) -> None:
        if max_rows < 1 or prefill_tokens < 1 or (max_kv_tokens is not None and max_kv_tokens < 1):
            raise ValueError("max_rows, prefill_tokens and max_kv_tokens must be >= 1")
        self.lm, self.max_rows, self.max_kv_tokens, self.prefill_tokens = lm, max_rows, max_kv_tokens, prefill_tokens
        self.on_token = on_token or (lambda seq: None)
        limit = lm.max_length if lm.max_length < UNBOUNDED else None
        self.cache = PreallocatedKVCache(max_rows=max_rows, max_capacity=limit)
        self.waiting: deque[Seq] = deque()
        self.prefilling: list[Seq] = []  # slots D … D+P-1
        self.decoding: list[Seq] = []    # slots 0 … D-1

    # ------------------------------------------------------------------------------------------ input

    def add(self, rows: Sequence[_Row], params: SamplingParams, echo: bool = False, owner: Any = None) -> None:
        """Queue the rows of one prompt (same context; ``n`` samples): prefilled once per ``max_rows`` of them.
        A ValueError when one row alone exceeds the KV-token budget."""
        stops = [s for s in params.stop if s]
        seqs = [Seq(r, params, stops, echo, owner) for r in rows]
        if params.max_tokens == 0 and not echo:  # nothing to compute
            for s in seqs:
                s.row.done = True
                self.on_token(s)
            return
        need = seqs[0].reserve(self.lm.max_length)
        if self.max_kv_tokens is not None and need > self.max_kv_tokens:
            raise ValueError(f"the prompt and max_tokens need {need} KV positions; this server holds "
                             f"{self.max_kv_tokens} (--kv-tokens)")
        per = self.max_rows if self.max_kv_tokens is None else max(1, min(self.max_rows, self.max_kv_tokens // need))
        for start in range(0, len(seqs), per):
            leader, *rest = seqs[start:start + per]
            leader.siblings = rest
            self.waiting.append(leader)

    def cancel(self, owner: Any) -> int:
        """Drop every row of ``owner`` wherever it is; the number of rows that were in the cache."""
        freed = 0
        self.waiting = deque(s for s in self.waiting if s.owner is not owner)
        for j in reversed(range(len(self.prefilling))):
            if self.prefilling[j].owner is owner:
                self._drop_prefilling(j)
                freed += 1
        for i in reversed(range(len(self.decoding))):
            if self.decoding[i].owner is owner:
                self._drop_decoding(i)
                freed += 1
        return freed

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.prefilling or self.decoding)

    def rows_in_use(self) -> int:
        return len(self.decoding) + sum(s.rows for s in self.prefilling)

    def run(self) -> None:
        """Step until every queued sequence has ended."""
        while not self.idle:
            self.step()

    @torch.no_grad()
    def step(self) -> None:
        if not self.prefilling:
            self._admit()
        slots = self.decoding + self.prefilling
        if slots:  # the cache's size follows the rows in use (within the KV-token budget)
            longest = max(s.reserve(self.lm.max_length) for s in slots)
            self.cache.reserve(self.rows_in_use(), longest, self.max_kv_tokens)
        self._prefill()
        self._decode()

    # ---------------------------------------------------------------------------------------- prefill

    def _fits(self, seq: Seq, width: int) -> bool:
        rows = self.rows_in_use() + seq.rows
        if rows > self.max_rows:
            return False
        if self.prefilling and (len(self.prefilling) + 1) * width > self.prefill_tokens:
            return False
        if self.max_kv_tokens is None:
            return True
        in_use = [s.reserve(self.lm.max_length) for s in self.decoding + self.prefilling]
        return rows * max(in_use + [seq.reserve(self.lm.max_length)]) <= self.max_kv_tokens

    def _admit(self) -> None:
        width = 0
        while self.waiting:
            seq = self.waiting[0]
            w = max(width, min(len(seq.row.context), self.prefill_tokens))
            if not self._fits(seq, w):
                return
            self.waiting.popleft()
            width = w
            self.cache.clear(len(self.decoding) + len(self.prefilling))
            self.prefilling.append(seq)

    def _prefill(self) -> None:
        if not self.prefilling:
            return
        counts = [min(len(s.row.context) - s.prefilled, self.prefill_tokens) for s in self.prefilling]
        width = max(counts)
        tokens = torch.zeros(len(counts), width, dtype=torch.long)
        for i, (s, c) in enumerate(zip(self.prefilling, counts)):
            tokens[i, width - c:] = torch.tensor(s.row.context[s.prefilled:s.prefilled + c])
        echo = any(s.echo for s in self.prefilling)
        first = len(self.decoding)
        positions = self.cache.begin(first, counts, width)
        logits = self.lm.logits(tokens, cache=self.cache, position_ids=positions, last_only=not echo)
        self.cache.commit()
        finished = []
        for j, (s, c) in enumerate(zip(self.prefilling, counts)):
            if s.echo:
                echo_chunk(s.row.out, logits[j, width - c:], s.prefilled, s.params.top_logprobs)
            s.prefilled += c
            if s.prefilled == len(s.row.context):
                finished.append((s, logits[j, -1]))
        for s, last in finished:  # slots move as rows join: find each by identity
            self._prompt_done(self.prefilling.index(s), last)

    def _prompt_done(self, j: int, last: torch.Tensor) -> None:
        """Prefilling row ``j`` has its whole prompt in: its samples draw their first tokens and join."""
        leader = self.prefilling[j]
        seqs = [leader] + leader.siblings
        for s in leader.siblings:
            s.row.out.prompt_logprobs = leader.row.out.prompt_logprobs
            s.row.out.prompt_top_logprobs = leader.row.out.prompt_top_logprobs
        leader.siblings = []
        if leader.params.max_tokens == 0:
            alive = []
            for s in seqs:
                s.row.done = True
                self.on_token(s)
        else:
            self._accept(seqs, last[None].expand(len(seqs), -1))
            alive = [s for s in seqs if not s.row.done]
        if not alive:
            self._drop_prefilling(j)
            return
        slot = self._promote(j, alive[0])
        for s in alive[1:]:
            self._append_decoding_copy(slot, s)

    # ----------------------------------------------------------------------------------------- decode

    def _decode(self) -> None:
        if not self.decoding:
            return
        tokens = torch.tensor([[s.row.out.tokens[-1]] for s in self.decoding], dtype=torch.long)
        positions = self.cache.begin(0, [1] * len(self.decoding), 1)
        logits = self.lm.logits(tokens, cache=self.cache, position_ids=positions, last_only=True)[:, -1]
        self.cache.commit()
        self._accept(self.decoding, logits)
        for i in reversed(range(len(self.decoding))):
            if self.decoding[i].row.done:
                self._drop_decoding(i)

    def _accept(self, seqs: list[Seq], logits: torch.Tensor) -> None:
        picked = sample_mixed(logits, [s.params for s in seqs], [s.row.generator for s in seqs],
                              [s.row.out.tokens for s in seqs])
        logp = F.log_softmax(logits, dim=-1)  # the model's own log-probabilities, reported as they are
        for k, s in enumerate(seqs):
            last_step = len(s.row.out.tokens) + 1 >= s.params.max_tokens
            _accept(s.row, picked[k], logp[k], self.lm, s.params, s.stops, last_step)
            self.on_token(s)

    # ------------------------------------------------------------------------------------------ slots

    def _drop_decoding(self, i: int) -> None:
        """Free decoding slot ``i``: the last decoding row moves in, the last prefilling row takes its slot."""
        last = len(self.decoding) - 1
        if i != last:
            self.cache.move(last, i)
            self.decoding[i] = self.decoding[last]
        self.decoding.pop()
        if self.prefilling:
            end = last + len(self.prefilling)
            self.cache.move(end, last)
            self.prefilling.insert(0, self.prefilling.pop())
            self.cache.clear(end)
        else:
            self.cache.clear(last)

    def _drop_prefilling(self, j: int) -> None:
        d = len(self.decoding)
        last = len(self.prefilling) - 1
        if j != last:
            self.cache.move(d + last, d + j)
            self.prefilling[j] = self.prefilling[last]
        self.prefilling.pop()
        self.cache.clear(d + last)

    def _promote(self, j: int, seq: Seq) -> int:
        """Prefilling row ``j`` becomes decoding row ``seq`` (its slot moves to the decoding region's end)."""
        d = len(self.decoding)
        if j != 0:
            self.cache.swap(d, d + j)
            self.prefilling[0], self.prefilling[j] = self.prefilling[j], self.prefilling[0]
        self.prefilling.pop(0)
        self.decoding.append(seq)
        return d

    def _append_decoding_copy(self, src: int, seq: Seq) -> None:
        """A new decoding row holding a copy of slot ``src`` (a sibling sample of the same prompt)."""
        d = len(self.decoding)
        if self.prefilling:  # the first prefilling row moves to the end to make room
            self.cache.move(d, d + len(self.prefilling))
            self.prefilling.append(self.prefilling.pop(0))
        self.cache.move(src, d)
        self.decoding.append(seq)
