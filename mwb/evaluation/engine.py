"""The serving engine: one scheduler thread owns the model and steps a :class:`~.batcher.ContinuousBatcher`;
requests from any thread join the running batch at its next step and leave it as soon as they end.

Why one thread: a KV cache and a TP collective must never see two callers at once, and a single owner
needs no lock around the model. Callers (the HTTP server's handler threads) only touch the engine through
:meth:`ServingEngine.submit` and a :class:`Request`: its completions, a queue of streaming events (so a slow
client never blocks the scheduler: the handler thread writes, not the scheduler) and a done flag.
:meth:`Request.cancel` (a client that went away) frees its rows at the next step.

Limits (:class:`EngineConfig`): ``batch_rows`` rows decode together, ``kv_tokens`` bounds the KV cache
(``rows × longest reserved length``, where a row reserves its prompt plus ``max_tokens``), ``prefill_tokens``
bounds one prefill pass, and at most ``max_queue`` requests wait for a row: one more raises
:class:`QueueFull` (HTTP 429).

Tensor parallelism: every TP rank runs the same batcher. TP rank 0 owns the queue and broadcasts, before
each step, what arrived and what was cancelled since the last one (token ids, sampling parameters, the
seed it drew); the other ranks call :meth:`ServingEngine.follow`, apply the same plan and step the same batch.
Logits are gathered to every rank and each row's random stream is seeded the same everywhere, so all ranks
accept the same tokens and end the same rows with no per-token communication. When idle, rank 0 sends an
empty plan every ``heartbeat_s`` so the others never wait on a collective long enough to time out.
"""
from __future__ import annotations

import itertools
import queue
import random
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, Union

import torch.distributed as dist

from mwb.core.parallel.collectives import group_size

from .batcher import ContinuousBatcher, Seq
from .generation import prompt_rows
from .sampling import Generation, SamplingParams, _Row


@dataclass(frozen=True)
class EngineConfig:
    """The serving limits (``mwb serve`` flags of the same names)."""
    max_queue: int = 256
    batch_rows: int = 16
    kv_tokens: int = 65536
    prefill_tokens: int = 2048
    heartbeat_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_queue", "batch_rows", "kv_tokens", "prefill_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class QueueFull(RuntimeError):
    """Too many requests are waiting for a row (HTTP 429)."""


class EngineClosed(RuntimeError):
    """The engine stopped before the request ended."""


class Request:
    """One submitted request: ``len(prompts) · n`` completions (prompt-major, like :func:`generate`)."""

    def __init__(self, engine: Optional["ServingEngine"], rid: int, groups: list[list[_Row]],
                 params: SamplingParams, seed: int, echo: bool, stream: bool) -> None:
        self.engine, self.id, self.groups, self.params, self.echo = engine, rid, groups, params, echo
        self.seed = seed  # the rows' random streams come from (seed, row): sent to the other TP ranks
        self.outputs: list[Generation] = [r.out for g in groups for r in g]
        self.remaining = len(self.outputs)
        self.events: Optional[queue.SimpleQueue] = queue.SimpleQueue() if stream else None
        self.done = threading.Event()
        self.cancelled = False
        self.error: Optional[BaseException] = None

    def cancel(self) -> None:
        """Stop generating (the client went away): the request's rows leave the batch at the next step."""
        if self.engine is not None and not self.done.is_set():
            self.engine.cancel(self)

    def _finish(self, error: Optional[BaseException] = None, cancelled: bool = False) -> None:
        self.error, self.cancelled = error, cancelled
        self.done.set()
        if self.events is not None:
            self.events.put(None)

    def result(self, timeout: Optional[float] = None) -> list[Generation]:
        if not self.done.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if self.error is not None:
            raise self.error
        if self.cancelled:
            raise EngineClosed(f"request {self.id} was cancelled")
        return self.outputs

    def stream(self, poll_s: float = 0.05, alive: Callable[[], bool] = lambda: True) -> Iterator[tuple[int, list[int]]]:
        """``(completion index, its tokens so far)`` after every token, until the request ends (then
        :meth:`result`). ``alive()`` is asked every ``poll_s`` while nothing arrives; False cancels."""
        if self.events is None:
            raise ValueError("this request was submitted without stream=True")
        while True:
            try:
                event = self.events.get(timeout=poll_s)
            except queue.Empty:
                if not alive():
                    self.cancel()
                    return
                continue
            if event is None:
                return
            yield event


class ServingEngine:
    """Continuous batching behind a request queue (see the module docstring). ``start=False`` leaves the
    scheduler stopped until :meth:`start` (requests queue up meanwhile)."""

    def __init__(self, lm, config: EngineConfig = EngineConfig(), start: bool = True) -> None:
        self.lm, self.config = lm, config
        self.tp = group_size(lm.tp_group) > 1
        self._src = lm.state.group_ranks["tp"][0] if self.tp else 0
        self._cv = threading.Condition()
        self._arrivals: list[Request] = []
        self._cancels: list[Request] = []
        self._live: dict[int, Request] = {}  # handed to the batcher, not finished
        self._waiting = 0                     # requests in the batcher still waiting for a row
        self._rows = self._peak_rows = 0      # rows holding a KV slot after the last step; the most so far
        self._closing = self._closed = False
        self._ids = itertools.count()
        self.counts = {"completed": 0, "cancelled": 0, "failed": 0}
        self.batcher = self._new_batcher()
        self._thread: Optional[threading.Thread] = None
        if start:
            self.start()

    def _new_batcher(self) -> ContinuousBatcher:
        c = self.config
        return ContinuousBatcher(self.lm, max_rows=c.batch_rows, max_kv_tokens=c.kv_tokens,
                                 prefill_tokens=c.prefill_tokens, on_token=self._on_token)

    # ----------------------------------------------------------------------------------- client side

    def submit(self, prompts: Sequence[Union[str, Sequence[int]]], params: SamplingParams, echo: bool = False,
               stream: bool = False) -> Request:
        """Queue a request (tokenized and checked here, in the caller's thread). ValueError for a request
        that can never run (a prompt longer than the model's context, more KV positions than the cache
        holds, beam search); :class:`QueueFull` when ``max_queue`` requests are already waiting."""
        if params.beam:
            raise ValueError("the serving engine does not run beam search (num_beams > 1)")
        seed = params.seed if params.seed is not None else random.SystemRandom().randrange(1 << 62)
        groups = prompt_rows(self.lm, prompts, params, seed=seed)
        for g in groups:
            need = min(len(g[0].context) + params.max_tokens, self.lm.max_length)
            if need > self.config.kv_tokens:
                raise ValueError(f"the prompt and max_tokens need {need} KV positions; this server holds "
                                 f"{self.config.kv_tokens} (--kv-tokens)")
        with self._cv:
            if self._closing:
                raise EngineClosed("the serving engine has stopped")
            if len(self._arrivals) + self._waiting >= self.config.max_queue:
                raise QueueFull(f"the server's queue is full ({self.config.max_queue} requests waiting for a "
                                f"row); retry later")
            req = Request(self, next(self._ids), groups, params, seed, echo, stream)
            self._arrivals.append(req)
            self._cv.notify_all()
        return req

    def generate(self, prompts, params: SamplingParams, echo_logprobs: bool = False,
                 on_token: Optional[Callable[[int, list[int]], None]] = None,
                 timeout: Optional[float] = None) -> list[Generation]:
        """:func:`~.generation.generate` through the engine (blocking); ``on_token(index, tokens)`` runs in
        the calling thread."""
        req = self.submit(prompts, params, echo=echo_logprobs, stream=on_token is not None)
        if on_token is not None:
            for index, tokens in req.stream():
                on_token(index, tokens)
        return req.result(timeout)

    def cancel(self, req: Request) -> None:
        with self._cv:
            if req in self._arrivals:
                self._arrivals.remove(req)
                self.counts["cancelled"] += 1
                req._finish(cancelled=True)
            elif not req.done.is_set():
                self._cancels.append(req)
                self._cv.notify_all()

    def stats(self) -> dict:
        with self._cv:
            return {"queued": len(self._arrivals) + self._waiting, "active_requests": len(self._live),
                    "rows": self._rows, "peak_rows": self._peak_rows, **self.counts}

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self.tp and self.lm.tp_rank != 0:
            raise RuntimeError("TP ranks other than 0 run ServingEngine.follow(), not a scheduler thread")
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mwb-engine", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the scheduler (and, under TP, the followers); unfinished requests fail with EngineClosed."""
        with self._cv:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self.tp:  # never started: the followers still wait for a plan
            self._broadcast(([], [], True))
        self._fail_all(EngineClosed("the serving engine has stopped"))

    # ----------------------------------------------------------------------------------- scheduler

    def _loop(self) -> None:
        while True:
            with self._cv:
                if not (self._closing or self._arrivals or self._cancels) and self.batcher.idle:
                    self._cv.wait(self.config.heartbeat_s if self.tp else None)
                arrivals, cancels, closing = self._arrivals, self._cancels, self._closing
                self._arrivals, self._cancels = [], []
            plan = ([(r.id, [o.prompt_tokens for o in r.outputs[::r.params.n]], r.params, r.seed, r.echo)
                     for r in arrivals], [r.id for r in cancels], closing)
            try:
                if self.tp:
                    self._broadcast(plan)
                self._apply(arrivals, cancels)
                if closing:
                    return
                self.batcher.step()
            except Exception as e:  # a failed step: its requests get the error, the server goes on
                if self.tp:  # the ranks may be out of step now: stop serving
                    self._fail_all(e)
                    with self._cv:
                        self._closing = True
                    return
                self._fail_all(e)
                self.batcher = self._new_batcher()
            self._note_state()

    def follow(self) -> None:
        """TP ranks other than 0: run every step TP rank 0 plans, until it closes."""
        if not self.tp or self.lm.tp_rank == 0:
            raise RuntimeError("follow() is for TP ranks other than 0")
        while True:
            arrivals, cancel_ids, closing = self._broadcast(None)
            reqs = []
            for rid, prompts, params, seed, echo in arrivals:
                groups = prompt_rows(self.lm, prompts, params, seed=seed)
                reqs.append(Request(None, rid, groups, params, seed, echo, stream=False))
            self._apply(reqs, [self._live[i] for i in cancel_ids if i in self._live])
            if closing:
                return
            self.batcher.step()

    def _broadcast(self, plan):
        box = [plan]
        dist.broadcast_object_list(box, src=self._src, group=self.lm.tp_group)
        return box[0]

    def _apply(self, arrivals: list[Request], cancels: list[Request]) -> None:
        for req in arrivals:
            self._live[req.id] = req
            for group in req.groups:  # rows with nothing to compute (max_tokens 0, no echo) end right here
                self.batcher.add(group, req.params, echo=req.echo, owner=req)
        for req in cancels:
            if self._live.pop(req.id, None) is not None:
                self.batcher.cancel(req)
                self.counts["cancelled"] += 1
                req._finish(cancelled=True)

    def _on_token(self, seq: Seq) -> None:
        req: Request = seq.owner
        if req.events is not None:
            req.events.put((seq.row.index, list(seq.row.out.tokens)))
        if seq.row.done:
            req.remaining -= 1
            if req.remaining == 0 and req.id in self._live:
                self._done(req)

    def _done(self, req: Request) -> None:
        self._live.pop(req.id, None)
        self.counts["completed"] += 1
        req._finish()

    def _note_state(self) -> None:
        waiting = len({id(s.owner) for s in self.batcher.waiting})
        rows = self.batcher.rows_in_use()
        with self._cv:
            self._waiting, self._rows, self._peak_rows = waiting, rows, max(self._peak_rows, rows)

    def _fail_all(self, error: BaseException) -> None:
        with self._cv:
            pending, self._arrivals = self._arrivals, []
        for req in list(self._live.values()) + pending:
            self.counts["failed"] += 1
            req._finish(error=error)
        self._live.clear()
