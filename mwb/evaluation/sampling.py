"""The pieces of sampling that every decoding loop shares — sampling parameters, a completion's record,
the top-k / top-p filters, per-row random streams, and the rule that appends a token to a row or ends it
(end of document, a stop string, the token budget, the model's context) — so the continuous batcher
(:mod:`.batcher`), the left-padded reference and beam search (:mod:`.generation`) and the encoder–decoder path
(:mod:`.seq2seq`) decide identically. The design notes are :mod:`.generation`'s docstring.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mwb.core.parallel.collectives import group_size

from .beam_search import PromptBeams, ban_repeats


@dataclass(frozen=True)
class SamplingParams:
    """``temperature == 0`` (or ``top_k == 1``) is greedy; ``top_k == 0`` and ``top_p == 1`` disable those
    filters. ``stop`` strings end a completion (not included in the text); so does the end-of-document
    token when ``stop_at_eod``. ``top_logprobs`` > 0 also returns the N most likely tokens per position.
    ``n`` completions are drawn per prompt (independent random streams; identical when greedy).
    ``num_beams`` > 1 is beam search (:mod:`.beam_search`, Hugging Face's rules): the ``n`` best of the
    finished beams, ranked by ``sum log p / generated_len ** length_penalty``. ``no_repeat_ngram_size`` N > 0
    (every mode) never lets a completion repeat one of its own N-grams (the prompt's are not counted)."""
    max_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    seed: Optional[int] = None
    stop_at_eod: bool = True
    top_logprobs: int = 0
    use_cache: bool = True
    n: int = 1
    num_beams: int = 1
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.n < 1:
            raise ValueError("n must be >= 1")
        if self.num_beams < 1:
            raise ValueError("num_beams must be >= 1")
        if self.beam and self.n > self.num_beams:
            raise ValueError(f"beam search returns at most num_beams ({self.num_beams}) completions, not n={self.n}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError("no_repeat_ngram_size must be >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def beam(self) -> bool:
        """Beam search (deterministic: temperature, top-k, top-p and the seed do not apply)."""
        return self.num_beams > 1


@dataclass
class Generation:
    """One completion. ``tokens``/``logprobs`` cover the completion only; ``prompt_logprobs`` (first entry
    ``None``: the first token has no context) is filled when asked for. ``finish_reason``: ``"length"``
    (max_tokens or the model's context reached) or ``"stop"`` (a stop string or end of document)."""
    prompt: str
    prompt_tokens: list[int]
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    prompt_logprobs: Optional[list[Optional[float]]] = None
    prompt_top_logprobs: Optional[list[Optional[dict[int, float]]]] = None
    finish_reason: str = "length"


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """``logits [..., vocab]`` with everything outside the top-k and outside the smallest set whose
    probability reaches ``top_p`` (nucleus; the most likely token always stays) set to ``-inf``, per row."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the strictly more likely tokens
        drop = before >= top_p
        drop[..., 0] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits


def sample_tokens(logits: torch.Tensor, params: SamplingParams,
                  generators: Sequence[Optional[torch.Generator]]) -> list[int]:
    """The next token of each row of ``logits [b, vocab]`` (fp32), row ``i`` drawing from ``generators[i]``."""
    if params.greedy:
        return torch.argmax(logits, dim=-1).tolist()
    probs = F.softmax(filter_logits(logits / params.temperature, params.top_k, params.top_p), dim=-1)
    return [int(torch.multinomial(probs[i], 1, generator=g)) for i, g in enumerate(generators)]


def _shared_seed(lm, seed: Optional[int]) -> int:
    """The seed every TP rank uses: the given one, or one drawn on TP rank 0 and broadcast."""
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 62)
    group = lm.tp_group
    if group_size(group) > 1:
        t = torch.tensor([seed], dtype=torch.long, device=lm.device)
        dist.broadcast(t, src=lm.state.group_ranks["tp"][0], group=group)
        seed = int(t.item())
    return seed


def row_generator(seed: int, row: int, device) -> torch.Generator:
    """Row ``row``'s own random stream: seeded from ``(seed, row)`` through SHA-512 (``random.Random`` with a
    string seed), so it is the same in every process and independent of the other rows."""
    g = torch.Generator(device=device)
    g.manual_seed(random.Random(f"{seed}/{row}").getrandbits(63))
    return g


def _top(logp: torch.Tensor, n: int) -> dict[int, float]:
    vals, idx = torch.topk(logp, min(n, logp.numel()))
    return {int(i): float(v) for i, v in zip(idx.tolist(), vals.tolist())}


def _cut_at_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def _trim_to(out: Generation, lm, cut: int) -> None:
    """Keep the completion text before a stop string, and the tokens whose text lies entirely before it."""
    full = lm.decode(out.tokens)
    k = len(out.tokens)
    while k > 0 and len(lm.decode(out.tokens[:k])) > cut:
        k -= 1
    out.tokens, out.logprobs = out.tokens[:k], out.logprobs[:k]
    if out.top_logprobs:
        out.top_logprobs = out.top_logprobs[:k]
    out.text = full[:cut]


@dataclass
class _Row:
    """One sequence being extended: its output, the tokens it conditions on, and its random stream."""
    out: Generation
    context: list[int]
    generator: Optional[torch.Generator]
    done: bool = False
    index: int = 0  # position in generate()'s result list


def _prompt_row(lm, prompt: Union[str, Sequence[int]]) -> tuple[Generation, list[int]]:
    """The empty output for ``prompt`` and the tokens generation conditions on (checked to fit)."""
    ids = lm.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
    text_prompt = prompt if isinstance(prompt, str) else lm.decode(ids)
    if not ids:
        if lm.eod is None:
            raise ValueError("an empty prompt needs a tokenizer with an end-of-document token")
        context = [lm.eod]  # condition on "start of document"; not part of the prompt
    else:
        context = list(ids)
    if len(context) > lm.max_length:
        raise ValueError(f"the prompt has {len(context)} tokens but the model takes at most {lm.max_length}")
    return Generation(prompt=text_prompt, prompt_tokens=list(ids)), context


def echo_chunk(out: Generation, logits: torch.Tensor, start: int, top_n: int) -> None:
    """Score the prompt's own tokens from the logits ``[c, vocab]`` of its positions ``start … start+c-1``
    (the logits at position ``t`` score token ``t+1``); called on each prefill chunk in order."""
    ids = out.prompt_tokens
    if out.prompt_logprobs is None:
        out.prompt_logprobs = [None] if ids else []
        if top_n:
            out.prompt_top_logprobs = [None] if ids else []
    end = min(start + logits.size(0), len(ids) - 1)  # positions whose next token is a prompt token
    if end <= start:
        return
    logp = F.log_softmax(logits[: end - start], dim=-1)
    tgt = torch.tensor(ids[start + 1:end + 1], dtype=torch.long, device=logits.device)
    out.prompt_logprobs.extend(float(v) for v in logp.gather(-1, tgt[:, None])[:, 0].tolist())
    if top_n:
        out.prompt_top_logprobs.extend(_top(row, top_n) for row in logp)


def _echo(out: Generation, logits: torch.Tensor, top_n: int) -> None:
    """Score the prompt's own tokens from the prompt's logits ``[len(context), vocab]``."""
    echo_chunk(out, logits, 0, top_n)


def sample_mixed(logits: torch.Tensor, params: Sequence[SamplingParams],
                 generators: Sequence[Optional[torch.Generator]], histories: Sequence[Sequence[int]]) -> list[int]:
    """The next token of each row of ``logits [b, vocab]`` under its own sampling parameters (and its own
    completion so far, for the no-repeat-n-gram rule). Rows with the same settings are sampled together;
    every operation is row-wise, so a row draws what it would draw alone."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(params):
        key = (p.no_repeat_ngram_size,) + (("greedy",) if p.greedy else (p.temperature, p.top_k, p.top_p))
        groups.setdefault(key, []).append(i)
    picked = [0] * len(params)
    for idx in groups.values():
        p = params[idx[0]]
        sub = logits if len(idx) == logits.size(0) else logits[idx]
        sub = ban_repeats(sub, [histories[i] for i in idx], p.no_repeat_ngram_size)
        for i, tok in zip(idx, sample_tokens(sub, p, [generators[i] for i in idx])):
            picked[i] = tok
    return picked


def _accept(row: _Row, tok: int, logp: torch.Tensor, lm, params: SamplingParams, stops: list[str],
            last_step: bool, prefix: Optional[int] = None) -> None:
    """Append ``tok`` to ``row`` (or finish it on end of document / a stop string / the token budget).
    ``prefix``: the tokens before the completion in the sequence ``lm`` extends (default: the context)."""
    out = row.out
    if params.stop_at_eod and lm.eod is not None and tok == lm.eod:
        out.finish_reason, row.done, out.text = "stop", True, lm.decode(out.tokens)
        return
    out.tokens.append(tok)
    out.logprobs.append(float(logp[tok]))
    if params.top_logprobs:
        out.top_logprobs.append(_top(logp, params.top_logprobs))
    if stops:
        cut = _cut_at_stop(lm.decode(out.tokens), stops)
        if cut is not None:
            _trim_to(out, lm, cut)
            out.finish_reason, row.done = "stop", True
            return
    # no forward pass for a token that will not be sampled (or that has no position left)
    before = len(row.context) if prefix is None else prefix
    row.done = last_step or before + len(out.tokens) > lm.max_length
    if row.done:
        out.text = lm.decode(out.tokens)


def beam_outputs(lm, out: Generation, beams: PromptBeams, n: int, stops: list[str]) -> list[Generation]:
    """The ``n`` best finished hypotheses of a prompt as generations (texts cut at a stop string)."""
    gens = []
    if not beams.finished:  # no token to generate (max_tokens = 0)
        return [out] + [Generation(prompt=out.prompt, prompt_tokens=list(out.prompt_tokens),
                                   prompt_logprobs=out.prompt_logprobs, prompt_top_logprobs=out.prompt_top_logprobs)
                        for _ in range(n - 1)]
    for j, hyp in enumerate(beams.best(n)):
        g = out if j == 0 else Generation(prompt=out.prompt, prompt_tokens=list(out.prompt_tokens),
                                          prompt_logprobs=out.prompt_logprobs,
                                          prompt_top_logprobs=out.prompt_top_logprobs)
        g.tokens, g.logprobs, g.top_logprobs = hyp.tokens, hyp.logprobs, hyp.top_logprobs
        g.finish_reason, g.text = hyp.finish_reason, lm.decode(hyp.tokens)
        cut = _cut_at_stop(g.text, stops) if stops else None
        if cut is not None:
            _trim_to(g, lm, cut)
        gens.append(g)
    return gens


def stop_check(lm, stops: list[str]):
    """``tokens → bool``: whether the completion's text holds a stop string (``None`` when there are none)."""
    return (lambda tokens: _cut_at_stop(lm.decode(tokens), stops) is not None) if stops else None

