"""Text generation from a causal LM: greedy, temperature, top-k and top-p (nucleus) sampling over left-padded
batches with a KV cache, stop strings, token budgets, seeds, ``n`` samples per prompt and per-token
log-probabilities. :func:`generate` is the one entry point (``mwb generate``, ``mwb serve`` and every
generation task use it).

Design choices, and why:
* **Left-padded batches.** Prompts are sorted by length and cut into batches of ``batch_size``; shorter
  prompts are padded on the left so every row's next token sits in the last column. A key-padding mask
  hides the pads and each row gets its own position ids (from 0 at its first real token), so a padded row
  computes what it computes alone, with rotary and learned positions alike. Without padding (all prompts
  of one length) the model takes its plain causal attention path.
* **Each row stops on its own** (end of document, a stop string, ``max_tokens``, or the model's context);
  finished rows are dropped from the batch and from the KV cache, and the batch ends when no row is left.
* **Per-row random streams.** Row ``r`` (prompt ``i``, sample ``j`` of ``n``: ``r = i·n + j``) samples with
  its own generator seeded from ``(seed, r)``. A completion therefore depends only on the seed, its prompt
  and its row number — not on ``batch_size`` nor on which other prompts share its batch — so batch 16 and
  batch 1 draw the same tokens, and the ``n`` samples of one prompt are independent streams.
* **Reported log-probabilities are the model's own** (log-softmax of the raw logits, temperature 1, before
  top-k/top-p), as the OpenAI completions API and lm-evaluation-harness expect; sampling settings change
  which token is chosen, never the number reported for it.
* **Mixture-of-experts models** with a finite capacity factor drop tokens depending on what else is in
  the batch (pads included), so only with enough capacity is their batched output the batch-1 output.
* **Tensor parallelism**: :class:`~mwb.evaluation.lm.LanguageModel` gathers the vocab-sharded logits, so
  every TP rank holds bitwise the same logits; the seed is broadcast from TP rank 0, so every rank draws
  the same tokens from its own generators and no per-token broadcast is needed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mwb.core.models.transformer import KVCache
from mwb.core.parallel.collectives import group_size

from .beam_search import PromptBeams, ban_repeats, run_beams


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


def _echo(out: Generation, logits: torch.Tensor, top_n: int) -> None:
    """Score the prompt's own tokens from the prompt's logits ``[len(context), vocab]``."""
    ids = out.prompt_tokens
    logp = F.log_softmax(logits[: max(len(ids) - 1, 0)], dim=-1)
    tgt = torch.tensor(ids[1:], dtype=torch.long, device=logits.device)
    scored = logp.gather(-1, tgt[:, None])[:, 0].tolist() if len(ids) > 1 else []
    out.prompt_logprobs = ([None] if ids else []) + [float(v) for v in scored]
    if top_n:
        out.prompt_top_logprobs = ([None] if ids else []) + [_top(row, top_n) for row in logp]


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


class _PaddedBatch:
    """Left-padded contexts in the model: tokens, key-padding mask, per-row positions and the KV cache, kept
    in step as rows leave (or, in beam search, are copied) and tokens are appended."""

    def __init__(self, lm, contexts: list[list[int]], use_cache: bool) -> None:
        width = max(len(c) for c in contexts)
        pads = torch.tensor([width - len(c) for c in contexts])
        self.lm, self.pads = lm, pads
        self.tokens = torch.tensor([[0] * (width - len(c)) + c for c in contexts], dtype=torch.long)
        self.padded = bool(pads.any())
        self.key_mask = torch.arange(width)[None, :] >= pads[:, None]  # [b, width]: true at real tokens
        self.positions = (torch.arange(width)[None, :] - pads[:, None]).clamp(min=0)
        self.cache = KVCache() if use_cache else None

    def forward(self, new_tokens: torch.Tensor, new_positions: torch.Tensor, last_only: bool = True) -> torch.Tensor:
        if self.cache is None:  # full recomputation: the reference the cache is tested against
            new_tokens, new_positions = self.tokens, self.positions
        return self.lm.logits(new_tokens, cache=self.cache, position_ids=new_positions if self.padded else None,
                              attention_mask=self.key_mask if self.padded else None, last_only=last_only)

    def prefill(self, last_only: bool = True) -> torch.Tensor:
        return self.forward(self.tokens, self.positions, last_only=last_only)

    def keep(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx`` (in that order; a repeated row is copied, cache included)."""
        self.tokens, self.key_mask, self.positions = self.tokens[idx], self.key_mask[idx], self.positions[idx]
        if self.cache is not None:
            self.cache.keep(idx)

    def extend(self, new: torch.Tensor) -> torch.Tensor:
        """Append ``new [b, 1]`` to every row; the next-token logits ``[b, vocab]``."""
        new_pos = self.positions[:, -1:] + 1
        self.tokens = torch.cat([self.tokens, new], dim=1)
        self.positions = torch.cat([self.positions, new_pos], dim=1)
        self.key_mask = torch.cat([self.key_mask, torch.ones_like(new, dtype=torch.bool)], dim=1)
        return self.forward(new, new_pos)[:, -1]


@torch.no_grad()
def _decode_batch(lm, rows: list[_Row], params: SamplingParams, echo_logprobs: bool,
                  on_token: Optional[Callable[[int, Generation], None]] = None) -> None:
    """Extend every row of one left-padded batch until each is done (fills ``row.out`` in place)."""
    batch = _PaddedBatch(lm, [r.context for r in rows], params.use_cache)
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
        logp = F.log_softmax(last, dim=-1)  # the model's own log-probabilities, reported as they are
        for k, r in enumerate(active):
            _accept(r, picked[k], logp[k], lm, params, stops, step + 1 == params.max_tokens)
            if on_token is not None:
                on_token(r.index, r.out)
        keep = [k for k, r in enumerate(active) if not r.done]
        if not keep:
            break
        if len(keep) < len(active):  # finished rows leave the batch (and the cache)
            batch.keep(torch.tensor(keep))
            active = [active[k] for k in keep]
        last = batch.extend(torch.tensor([[r.out.tokens[-1]] for r in active], dtype=torch.long))


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
    ``finish_reason`` is final once the row is done), which is how the server streams."""
    params = params or SamplingParams()
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if isinstance(prompts, str):
        prompts = [prompts]
    if params.beam:
        return beam_generate(lm, prompts, params, batch_size, echo_logprobs)
    seed = None if params.greedy else _shared_seed(lm, params.seed)
    rows: list[_Row] = []
    for prompt in prompts:
        out, context = _prompt_row(lm, prompt)
        for j in range(params.n):
            gen = None if seed is None else row_generator(seed, len(rows), lm.device)
            copy = out if j == 0 else Generation(prompt=out.prompt, prompt_tokens=list(out.prompt_tokens))
            rows.append(_Row(copy, context, gen, index=len(rows)))
    if params.max_tokens == 0 and not echo_logprobs:
        return [r.out for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].context))  # similar lengths share a batch
    for start in range(0, len(order), batch_size):
        _decode_batch(lm, [rows[i] for i in order[start:start + batch_size]], params, echo_logprobs, on_token)
    return [r.out for r in rows]


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
