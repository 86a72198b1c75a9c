"""Zero-shot option scoring: the prediction is the option a causal LM finds most likely after the context.

Each option is scored by the summed log-probability of its tokens given the context (``context + option``
tokenised as one string would merge pieces across the boundary, so the two are tokenised apart, as
lm-evaluation-harness does). ``--normalize`` divides by the option's token count (length-normalised
accuracy). Rows of one batch are right-padded: the model is causal, so padding never changes a scored
position.
"""
from __future__ import annotations

from typing import Optional

import torch

from mwb.evaluation.loading import load_language_model


def load_model(task, checkpoint: str, tokenizer: Optional[str] = None, device=None):
    return load_language_model(checkpoint, tokenizer, device=device)


def build(task, examples: list[dict], lm) -> list[dict]:
    items = []
    for e in examples:
        x = task.inputs(e, lm.tokenizer, 0)
        ctx = lm.encode(x["context"]) or ([lm.eod] if lm.eod is not None else [])
        items.append({"context": ctx, "options": [lm.encode(o) for o in x["options"]]})
    return items


@torch.no_grad()
def option_logprobs(lm, context: list[int], options: list[list[int]]) -> list[float]:
    """Σ log p(option tokens | context) for each option, in one padded batch."""
    rows = [(context + o)[-lm.max_length - 1:] for o in options]
    width = max(len(r) for r in rows) - 1
    pad = lm.eod if lm.eod is not None else 0
    inputs = torch.tensor([r[:-1] + [pad] * (width - len(r) + 1) for r in rows], dtype=torch.long)
    logp = lm.log_probs(inputs)
    scores = []
    for b, (row, opt) in enumerate(zip(rows, options)):
        n = len(opt)
        tgt = torch.tensor(row[-n:], device=logp.device)
        scores.append(float(logp[b, len(row) - 1 - n:len(row) - 1].gather(-1, tgt[:, None]).sum()))
    return scores


def run(task, lm, items) -> list[int]:
    preds = []
    for it in items:
        scores = option_logprobs(lm, it["context"], it["options"])
        if task.opts.get("normalize"):
            scores = [s / max(len(o), 1) for s, o in zip(scores, it["options"])]
        preds.append(max(range(len(scores)), key=scores.__getitem__))
    return preds
