"""One generated sentence per prompt that always has words: the story writer's sentence step.

Why: the generator is trained on ``prompt → " sentence" + end of document`` and decoded with the line break as
a stop string, so a small model whose first sampled token is the end of document or a line break ends the
sentence before it has begun — ``generate`` then returns ``""``, which the writer used to accept as a story
sentence (the tiny default GPT did that for three of four sentences). Here a generation with no word goes on:
its first token is drawn again from the same distribution (temperature, top-k) restricted to tokens that
carry a word character (never the end of document, a line break or punctuation alone), and generation
continues after it up to the usual stop. A sentence that reaches ``max_tokens`` without a stop is kept and
marked ``truncated``; one that still has no word (a prompt at the model's context limit) is marked ``empty``
— an error the writer counts and the commands report, never a silent ``""``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import torch

from mwb.evaluation.generation import SamplingParams, generate, row_generator, sample_tokens

WORD = re.compile(r"[^\W_]")  # a letter or a digit
SPECIAL = re.compile(r"^\s*<\|?[^<>\s]*\|?>\s*$")  # <|endoftext|>, <s>, <pad>: a special token's text

# the random streams of the redrawn first tokens: apart from generate()'s row streams of the same seed
REDRAW_STREAM = 1 << 20


@dataclass(frozen=True)
class Sentence:
    text: str               # whitespace-normalised
    truncated: bool = False  # ended at max_tokens, not at the end of document / line break
    empty: bool = False      # no word even after the redraw: an error to report
    redrawn: bool = False    # the first sampled token ended the sentence and was drawn again


def has_words(text: str) -> bool:
    return bool(WORD.search(text))


def word_token_mask(lm) -> torch.Tensor:
    """``[vocab]`` bool: tokens whose own text holds a letter or digit and that are not special tokens (the end
    of document included). Decoded once per model (cached on it)."""
    cached = getattr(lm, "_mwb_word_tokens", None)
    if cached is not None:
        return cached
    mask = torch.zeros(lm.vocab_size, dtype=torch.bool)
    for i in range(lm.vocab_size):
        t = lm.decode([i])
        mask[i] = bool(WORD.search(t)) and not SPECIAL.match(t)
    if lm.eod is not None and lm.eod < lm.vocab_size:
        mask[lm.eod] = False
    lm._mwb_word_tokens = mask
    return mask


@torch.no_grad()
def _first_word_token(lm, prompt_ids: list[int], params: SamplingParams, row: int) -> int:
    logits = lm.logits(torch.tensor([prompt_ids], dtype=torch.long), last_only=True)[0, -1].float().cpu()
    logits = logits.masked_fill(~word_token_mask(lm), float("-inf"))
    gen = None if params.greedy else row_generator(params.seed or 0, REDRAW_STREAM + row, logits.device)
    return sample_tokens(logits[None], params, [gen])[0]


def write_sentences(lm, prompts: list[str], params: SamplingParams, batch_size: int = 32) -> list[Sentence]:
    """One sentence per prompt (see the module docstring); the same seed gives the same sentences."""
    gens = generate(lm, prompts, params, batch_size=batch_size)
    out = [Sentence(" ".join(g.text.split()), truncated=g.finish_reason == "length") for g in gens]
    redo = [i for i, s in enumerate(out) if not has_words(s.text)]
    if not redo:
        return out
    starts, heads = [], {}
    for i in redo:
        ids = lm.encode(prompts[i])
        if len(ids) + 1 >= lm.max_length:  # no room for a word after the prompt
            out[i] = Sentence("", empty=True)
            continue
        heads[i] = _first_word_token(lm, ids, params, i)
        starts.append((i, ids + [heads[i]]))
    if starts:
        more = dataclasses.replace(params, max_tokens=max(params.max_tokens - 1, 0),
                                   seed=None if params.seed is None else params.seed + REDRAW_STREAM)
        conts = generate(lm, [ids for _, ids in starts], more, batch_size=batch_size) if more.max_tokens else \
            [None] * len(starts)
        for (i, _), c in zip(starts, conts):
            text = " ".join((lm.decode([heads[i]]) + (c.text if c is not None else "")).split())
            truncated = c is None or c.finish_reason == "length"
            out[i] = Sentence(text, truncated=truncated, empty=not has_words(text), redrawn=True)
    return out
