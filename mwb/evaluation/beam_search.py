"""Beam search and the no-repeat-n-gram rule, model-agnostic: the part of decoding that decides which
sequences live on, shared by the decoder-only (:mod:`.generation`) and encoder–decoder (:mod:`.seq2seq`)
paths, which only supply the model's next-token logits and reorder their KV caches.

The rules are Hugging Face ``generate``'s (``num_beams``, ``length_penalty``, ``early_stopping=False``,
``no_repeat_ngram_size``), so a model converted from ``transformers`` decodes the same tokens:

* Each step every running beam's log-softmax (n-gram-banned tokens at ``-inf``) is added to its score, and
  the best ``2 · num_beams`` (beam, token) candidates are kept. Candidates that end a sequence (the end
  token, a stop string, the token budget or the model's context) go to the finished hypotheses — but only
  those among the first ``num_beams`` candidates — with score ``sum log p / generated_len ** length_penalty``
  (``generated_len`` counts the end token). The best ``num_beams`` candidates that do not end go on.
* A prompt is done when its token budget is spent, or when ``num_beams`` hypotheses are finished and the
  best running beam, scored at its current length, no longer beats the worst finished one.
* At the first step all beams are the prompt, so only beam 0's candidates count (the others score ``-1e9``).

Why per prompt: a prompt that is done leaves the batch (and its rows the KV cache) at once, so a prompt's
result never depends on which other prompts share its batch. ``num_beams = 1`` keeps one beam, and with
``length_penalty = 0`` (or no end token) that is greedy decoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

UNREACHABLE = -1.0e9  # the score HF gives beams that may not be chosen (kept finite: it is also added to)


def banned_tokens(history: Sequence[int], n: int) -> list[int]:
    """Tokens that would complete an ``n``-gram already in ``history`` (its last ``n-1`` tokens + the token)."""
    if n <= 0 or len(history) < n:
        return []
    tail = list(history[len(history) - n + 1:])
    return [history[i + n - 1] for i in range(len(history) - n + 1) if list(history[i:i + n - 1]) == tail]


def ban_repeats(logits: torch.Tensor, histories: Sequence[Sequence[int]], n: int) -> torch.Tensor:
    """``logits [rows, vocab]`` with each row's :func:`banned_tokens` set to ``-inf`` (unchanged when ``n == 0``)."""
    if n <= 0:
        return logits
    rows = [(r, t) for r, h in enumerate(histories) for t in banned_tokens(h, n)]
    if not rows:
        return logits
    out = logits.clone()
    r, t = zip(*rows)
    out[list(r), list(t)] = float("-inf")
    return out


@dataclass
class Hypothesis:
    """A finished sequence: the generated tokens (without the end token), each token's log-probability
    under the model, the top-N alternatives when asked for, its beam score and why it ended."""
    tokens: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[int, float]]
    score: float
    finish_reason: str  # "stop" (end token or stop string) or "length"


@dataclass
class PromptBeams:
    """One prompt's beam search: ``num_beams`` running beams and the best finished hypotheses.

    ``max_new``: the most tokens a completion may have. ``end``: the end token (``None``: none ends a
    sequence). ``stopped(tokens)``: whether a completion ends on a stop string. ``prefix``: tokens before
    the completion that the n-gram rule also sees (T5's decoder start token). ``top_n``: alternatives kept
    per position."""
    num_beams: int
    max_new: int
    length_penalty: float = 1.0
    no_repeat_ngram: int = 0
    end: Optional[int] = None
    stopped: Optional[Callable[[list[int]], bool]] = None
    prefix: Sequence[int] = ()
    top_n: int = 0
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    tops: list[list[dict]] = field(default_factory=list)
    scores: Optional[torch.Tensor] = None
    finished: list[Hypothesis] = field(default_factory=list)
    done: bool = False

    def __post_init__(self) -> None:
        nb = self.num_beams
        self.tokens, self.logprobs, self.tops = [[] for _ in range(nb)], [[] for _ in range(nb)], \
            [[] for _ in range(nb)]
        self.scores = torch.full((nb,), UNREACHABLE)
        self.scores[0] = 0.0
        self.done = self.max_new <= 0

    def step(self, logits: torch.Tensor) -> tuple[list[int], list[int]]:
        """Advance by one token given the running beams' next-token ``logits [num_beams or 1, vocab]`` (fp32;
        one row when the beams are still copies of the prompt). Returns, for the beams that go on, the row of
        ``logits`` each extends and its new token (empty once the prompt is done)."""
        nb, vocab = self.num_beams, logits.size(-1)
        logp = F.log_softmax(logits.float(), dim=-1).expand(nb, vocab)
        banned = ban_repeats(logp, [list(self.prefix) + t for t in self.tokens], self.no_repeat_ngram)
        total = (banned + self.scores.to(logp.device)[:, None]).reshape(-1)
        cand_scores, cand = torch.topk(total, min(2 * nb, total.numel()))
        cand_scores = cand_scores.cpu()
        cand_beams, cand_tokens = (cand // vocab).tolist(), (cand % vocab).tolist()
        length = len(self.tokens[0]) + 1  # tokens each candidate has generated, itself included
        reasons = [self._reason(b, t, length) for b, t in zip(cand_beams, cand_tokens)]
        ended = torch.tensor([r is not None for r in reasons], dtype=torch.float32)
        going_on = cand_scores + ended * UNREACHABLE
        keep = torch.topk(going_on, nb).indices.tolist()
        for j in range(nb):  # only the first num_beams candidates may finish
            if reasons[j] is not None:
                score = float(cand_scores[j] / (length ** self.length_penalty))
                self._finish(cand_beams[j], cand_tokens[j], logp, score, reasons[j])
        parents, picked = [cand_beams[j] for j in keep], [cand_tokens[j] for j in keep]
        self.tokens, self.logprobs, self.tops = self._extend(parents, picked, logp)
        self.scores = going_on[keep]
        if length >= self.max_new:
            self.done = True
        elif len(self.finished) == nb:  # can the best running beam still beat the worst finished one?
            best_possible = self.scores[:1] / (length ** self.length_penalty)
            self.done = not bool(best_possible > self.finished[-1].score)
        return ([], []) if self.done else (parents, picked)

    def best(self, n: int) -> list[Hypothesis]:
        """The ``n`` best finished hypotheses, best first."""
        return self.finished[:n]

    # ---------------------------------------------------------------------------------------- internals
    def _reason(self, beam: int, tok: int, length: int) -> Optional[str]:
        """Why a candidate ends its sequence: ``"end"`` (the end token), ``"stop"`` (a stop string),
        ``"length"`` (the token budget), or ``None`` (it goes on)."""
        if self.end is not None and tok == self.end:
            return "end"
        if self.stopped is not None and self.stopped(self.tokens[beam] + [tok]):
            return "stop"
        return "length" if length >= self.max_new else None

    def _extend(self, beams: list[int], toks: list[int], logp: torch.Tensor):
        tokens, logprobs, tops = [], [], []
        for b, t in zip(beams, toks):
            tokens.append(self.tokens[b] + [t])
            logprobs.append(self.logprobs[b] + [float(logp[b, t])])
            tops.append(self.tops[b] + [_top(logp[b], self.top_n)] if self.top_n else [])
        return tokens, logprobs, tops

    def _finish(self, beam: int, tok: int, logp: torch.Tensor, score: float, reason: str) -> None:
        """Keep a finished hypothesis when it is among the ``num_beams`` best (ties: the earlier one stays)."""
        (tokens,), (logprobs,), (tops,) = self._extend([beam], [tok], logp)
        if reason == "end":  # the end token closes the sequence but is not part of the completion
            tokens, logprobs, tops = tokens[:-1], logprobs[:-1], tops[:-1]
        hyp = Hypothesis(tokens, logprobs, tops, score, "length" if reason == "length" else "stop")
        at = next((i for i, h in enumerate(self.finished) if score > h.score), len(self.finished))
        self.finished.insert(at, hyp)
        del self.finished[self.num_beams:]


def _top(logp: torch.Tensor, n: int) -> dict[int, float]:
    vals, idx = torch.topk(logp, min(n, logp.numel()))
    return {int(i): float(v) for i, v in zip(idx.tolist(), vals.tolist())}


def run_beams(beams: Sequence[PromptBeams], logits: torch.Tensor,
              advance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Beam-search every prompt of a batch to its end. ``logits [prompts, vocab]``: each prompt's next-token
    logits after its prompt (one model row per prompt). ``advance(rows, new_tokens)`` keeps the model's batch
    rows ``rows`` (repeats allowed: a beam's cache is copied to each of its continuations; a prompt that is
    done loses its rows), appends ``new_tokens [len(rows), 1]`` and returns their next-token logits."""
    in_batch = list(range(len(beams)))  # prompts holding model rows, in row order
    width = [1] * len(beams)  # rows each of them holds (1 until its first step: the beams are the prompt)
    while True:
        rows, new, still, offset = [], [], [], 0
        for i in in_batch:
            if not beams[i].done:
                parents, toks = beams[i].step(logits[offset:offset + width[i]])
                if parents:
                    rows += [offset + (p if width[i] > 1 else 0) for p in parents]
                    new += toks
                    still.append(i)
            offset += width[i]
        if not still:
            return
        for i in still:
            width[i] = beams[i].num_beams
        in_batch = still
        logits = advance(torch.tensor(rows, dtype=torch.long), torch.tensor(new, dtype=torch.long)[:, None])
