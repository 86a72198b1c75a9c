"""The story eval's pieces that are not the task's declarations: how many stories a no-argument run writes
for a generator of a given size, and the gold sentences' log-likelihood under the run's generator.

Why apart: :mod:`.task` declares data, options and records; these are computations it calls (each a function of
its inputs), kept where the size rule and the scoring can be read and tested alone."""
from __future__ import annotations

import torch

from .writer import SENTENCES, StoryWriter

TINY_STORIES, REAL_STORIES, LARGE_PARAMS = 100, 24, 50e6


def generator_params(cfg) -> int:
    """Weights of the generator's transformer blocks, from its config (no model needed): attention and a
    gated (3-matrix) MLP per layer, the cost that scales a story's writing."""
    m = cfg.model
    ffn = m.ffn_hidden_size or 4 * m.hidden_size
    return m.num_layers * (4 * m.hidden_size ** 2 + 3 * m.hidden_size * ffn)


def default_stories(cfg) -> int:
    """:data:`REAL_STORIES` for a generator of SmolLM2-135M's size (over :data:`LARGE_PARAMS`), else
    :data:`TINY_STORIES`."""
    return REAL_STORIES if generator_params(cfg) > LARGE_PARAMS else TINY_STORIES


@torch.no_grad()
def gold_nll(writer: StoryWriter, stories) -> list[tuple[float, int]]:
    """Per story: summed NLL (nats) and count of the tokens of gold sentences 2–5 and the closing
    end-of-document token, as the generator was trained, given the gold story so far."""
    lm, out = writer.lm, []
    contexts = [" ".join(s.sentences[:t]) for s in stories for t in range(1, SENTENCES)]
    targets = [s.sentences[t] for s in stories for t in range(1, SENTENCES)]
    keywords = writer.predict_keywords(contexts)
    prompts, _ = writer.prompts(contexts, keywords)
    per = []
    for p, tgt in zip(prompts, targets):
        ids_p, ids_t = lm.encode(p), lm.encode(" " + tgt) + ([lm.eod] if lm.eod is not None else [])
        lp = lm.token_logprobs(ids_p + ids_t)[len(ids_p):]
        per.append((-sum(lp), len(ids_t)))
    for i in range(len(stories)):
        chunk = per[i * (SENTENCES - 1):(i + 1) * (SENTENCES - 1)]
        out.append((sum(c[0] for c in chunk), sum(c[1] for c in chunk)))
    return out
