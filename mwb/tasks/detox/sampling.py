"""Nucleus sampling for SGEAT, seeded per prompt, and the progress bar every long step shows.

Why a seed per prompt: ``generate`` seeds row ``r`` of one call from ``(seed, r)``, so if the prompts of
several data-parallel ranks went through one call each, a prompt's samples would depend on its place in
its rank's shard. Each prompt here is its own call (its ``n`` samples are one batch) with a seed derived
from ``(seed, prompt index)``, so the samples — and the metrics — are the same on one process and on any
number of ranks. Self-generation (one empty prompt, many samples) seeds each chunk of samples the same way.
"""
from __future__ import annotations

import dataclasses
import random
import sys
from mwb.evaluation.generation import SamplingParams, generate

TOP_P, TEMPERATURE = 0.9, 1.0  # the paper's nucleus sampling, for self-generation and evaluation


def prompt_seed(seed: int, index: int) -> int:
    """The sampling seed of prompt ``index``: the same wherever the prompt is evaluated."""
    return random.Random(f"{seed}/prompt/{index}").getrandbits(62)


def nucleus(max_tokens: int, n: int, seed: int, top_p: float = TOP_P, temperature: float = TEMPERATURE,
            stop_at_eod: bool = True) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, n=n, seed=seed,
                          stop_at_eod=stop_at_eod)


def continuations(lm, prompt: str, index: int, params: SamplingParams, batch_size: int) -> list[str]:
    """``params.n`` continuations of ``prompt`` (text only, the prompt excluded), seeded by its index."""
    seeded = dataclasses.replace(params, seed=prompt_seed(params.seed or 0, index))
    return [g.text for g in generate(lm, [prompt], seeded, batch_size=batch_size)]


def bar(total: int, desc: str, unit: str, enabled: bool = True):
    """A tqdm bar on stderr (plain periodic lines when stderr is not a terminal); off on ranks > 0."""
    from tqdm import tqdm
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, dynamic_ncols=tty,
                mininterval=0.5 if tty else 30.0)


def rank0() -> bool:
    import torch.distributed as dist
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
