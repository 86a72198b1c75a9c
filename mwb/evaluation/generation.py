"""Text generation from a causal LM: greedy, temperature, top-k and top-p (nucleus) sampling, with the KV
cache, stop strings, token budgets, seeds, and per-token log-probabilities.

Design choices, and why:
* **One prompt at a time** (a loop over a batch of prompts) rather than left-padding: the GPT model takes
  no key-padding mask, and left-padding would shift positions and let pad tokens be attended to. The
  loop is exact — a prompt's output does not depend on what else is in the batch — which is what
  reproducible sampling and the cache-vs-no-cache test need. Throughput is not the goal here.
* **Reported log-probabilities are the model's own** (log-softmax of the raw logits, temperature 1, before
  top-k/top-p), as the OpenAI completions API and lm-evaluation-harness expect; sampling settings change
  which token is chosen, never the number reported for it.
* **Tensor parallelism**: :class:`~mwb.evaluation.lm.LanguageModel` gathers the vocab-sharded logits, so
  every TP rank holds bitwise the same logits; the seed is broadcast from TP rank 0, so every rank draws
  the same token from its own generator and no per-token broadcast is needed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mwb.core.models.transformer import KVCache
from mwb.core.parallel.collectives import group_size


@dataclass(frozen=True)
class SamplingParams:
    """``temperature == 0`` (or ``top_k == 1``) is greedy; ``top_k == 0`` and ``top_p == 1`` disable those
    filters. ``stop`` strings end a completion (not included in the text); so does the end-of-document
    token when ``stop_at_eod``. ``top_logprobs`` > 0 also returns the N most likely tokens per position."""
    max_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    seed: Optional[int] = None
    stop_at_eod: bool = True
    top_logprobs: int = 0
    use_cache: bool = True

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


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
    """``logits [vocab]`` with everything outside the top-k and outside the smallest set whose probability
    reaches ``top_p`` (nucleus; the most likely token always stays) set to ``-inf``."""
    logits = logits.clone()
    if top_k > 0 and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the strictly more likely tokens
        drop = before >= top_p
        drop[0] = False
        logits[order[drop]] = float("-inf")
    return logits


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: Optional[torch.Generator]) -> int:
    """Choose the next token from ``logits [vocab]`` (fp32) under ``params``."""
    if params.greedy:
        return int(torch.argmax(logits))
    scaled = filter_logits(logits / params.temperature, params.top_k, params.top_p)
    probs = F.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


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


def _top(logp: torch.Tensor, n: int) -> dict[int, float]:
    vals, idx = torch.topk(logp, min(n, logp.numel()))
    return {int(i): float(v) for i, v in zip(idx.tolist(), vals.tolist())}


def _cut_at_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


@torch.no_grad()
def generate_one(lm, prompt: Union[str, Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, echo_logprobs: bool = False) -> Generation:
    """Complete one prompt (text or token ids). ``echo_logprobs`` also scores the prompt's own tokens."""
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
    out = Generation(prompt=text_prompt, prompt_tokens=list(ids))
    if params.max_tokens == 0 and not echo_logprobs:
        return out
    cache = KVCache() if params.use_cache else None
    logits = lm.logits(torch.tensor([context], dtype=torch.long), cache=cache)[0]
    if echo_logprobs:
        logp = F.log_softmax(logits[: len(ids) - 1], dim=-1) if ids else logits[:0]
        tgt = torch.tensor(ids[1:], dtype=torch.long, device=logits.device)
        scored = logp.gather(-1, tgt[:, None])[:, 0].tolist() if len(ids) > 1 else []
        out.prompt_logprobs = ([None] if ids else []) + [float(v) for v in scored]
        if params.top_logprobs:
            out.prompt_top_logprobs = ([None] if ids else []) + [_top(row, params.top_logprobs) for row in logp]
    last = logits[-1]
    seq = list(context)
    stops = [s for s in params.stop if s]
    for step in range(params.max_tokens):
        tok = sample_token(last, params, generator)
        logp = F.log_softmax(last, dim=-1)
        if params.stop_at_eod and lm.eod is not None and tok == lm.eod:
            out.finish_reason = "stop"
            break
        out.tokens.append(tok)
        out.logprobs.append(float(logp[tok]))
        if params.top_logprobs:
            out.top_logprobs.append(_top(logp, params.top_logprobs))
        seq.append(tok)
        if stops:
            text = lm.decode(out.tokens)
            cut = _cut_at_stop(text, stops)
            if cut is not None:
                _trim_to(out, lm, cut)
                out.finish_reason = "stop"
                return out
        if step + 1 == params.max_tokens or len(seq) > lm.max_length:
            break  # no forward pass for a token that will not be sampled (or no position left for it)
        if cache is not None:
            last = lm.logits(torch.tensor([[tok]], dtype=torch.long), cache=cache)[0, -1]
        else:  # full recomputation: the reference the cache is tested against
            last = lm.logits(torch.tensor([seq], dtype=torch.long))[0, -1]
    out.text = lm.decode(out.tokens)
    return out


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


def generate(lm, prompts: Union[str, Sequence[Union[str, Sequence[int]]]],
             params: Optional[SamplingParams] = None, echo_logprobs: bool = False) -> list[Generation]:
    """Complete each prompt in turn (see the module docstring); one seeded generator serves the whole
    batch, so the same seed and prompts give the same completions on every run and every TP rank."""
    params = params or SamplingParams()
    if isinstance(prompts, str):
        prompts = [prompts]
    generator = None
    if not params.greedy:
        generator = torch.Generator(device=lm.device)
        generator.manual_seed(_shared_seed(lm, params.seed))
    return [generate_one(lm, p, params, generator, echo_logprobs) for p in prompts]
