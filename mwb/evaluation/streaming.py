"""Text deltas for streamed completions (chat and plain), from a completion's tokens so far.

Two hold-backs so nothing sent is ever taken back: text that could be the beginning of a stop string (sent
once the string cannot form any more), and a trailing incomplete UTF-8 character (``\\ufffd`` from a token
that ends mid-character). The finishing chunk of a choice (with its ``finish_reason``) comes when the request
is done, after the final text (stop strings already cut off).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .sampling import Generation


class DeltaStreamer:
    """Turns per-token updates into text deltas sent through ``send``. ``delta(index, text, first)`` and
    ``final(index, finish_reason)`` build the chunk objects (the endpoint's format; a ``None`` first chunk is
    not sent); ``prefix`` is text sent before a choice's completion (the prompt, for ``echo``)."""

    def __init__(self, lm, stops: Sequence[str], send: Callable[[dict], None],
                 delta: Callable[[int, str, bool], dict], final: Callable[[int, str], dict],
                 prefix: Callable[[int], str] = lambda index: "") -> None:
        self.lm, self.send, self.delta, self.final, self.prefix = lm, send, delta, final, prefix
        self.hold = max((len(s) for s in stops if s), default=1) - 1
        self.sent: dict[int, int] = {}

    def _emit(self, index: int, text: str) -> None:
        start = self.sent.get(index)
        if start is None:
            first = self.delta(index, self.prefix(index), True)
            if first is not None:
                self.send(first)
            start = self.sent[index] = 0
        if len(text) > start:
            self.send(self.delta(index, text[start:], False))
            self.sent[index] = len(text)

    def step(self, index: int, tokens: list[int]) -> None:
        """Completion ``index`` has ``tokens`` so far."""
        text = self.lm.decode(tokens)
        safe = len(text) - self.hold
        while safe > 0 and text[safe - 1] == "\ufffd":  # a character still being decoded
            safe -= 1
        self._emit(index, text[:max(safe, self.sent.get(index, 0))])

    def finish(self, index: int, out: Generation) -> None:
        self._emit(index, out.text)
        self.send(self.final(index, out.finish_reason))
