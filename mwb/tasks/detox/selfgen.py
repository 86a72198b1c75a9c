"""SGEAT's data steps: unconditional self-generation, and keeping the least toxic half.

Self-generation (the paper's ``generate_samples_gpt.py`` without a prompt): each sample starts from the
end-of-document token alone, nucleus p 0.9, temperature 1, and runs until the model ends the document or
``max_tokens``. Rows are ``{"text", "prompt": "", "id"}``. Samples are drawn ``batch_size`` at a time; chunk
``c`` is seeded from ``(seed, c)``, so a run is reproducible.

Filtering (the paper's ``filter-selfgeneration.py``): drop unscored rows, sort by toxicity ascending (ties
keep file order), keep the first ``⌊keep·n⌋`` where ``n`` counts *every* line, unscored ones included, and
shuffle them (seeded).
"""
from __future__ import annotations

import math
import random

from mwb.core.errors import DataError

from .sampling import bar, continuations, nucleus


def self_generate(lm, num_samples: int, max_tokens: int, seed: int = 1234, batch_size: int = 16,
                  progress: bool = True) -> list[dict]:
    """``num_samples`` unconditional samples from ``lm`` as ``{"text", "prompt", "id"}`` rows."""
    if num_samples < 1 or max_tokens < 1:
        raise DataError("self-generation needs --num-samples >= 1 and --max-tokens >= 1")
    rows: list[dict] = []
    with bar(num_samples, "self-generation", "sample", enabled=progress) as b:
        for chunk, start in enumerate(range(0, num_samples, batch_size)):
            n = min(batch_size, num_samples - start)
            texts = continuations(lm, "", chunk, nucleus(max_tokens, n, seed), batch_size)
            rows.extend({"text": t, "prompt": "", "id": start + k} for k, t in enumerate(texts))
            b.update(n)
    return rows


def filter_least_toxic(rows: list[dict], keep: float = 0.5, seed: int = 1234) -> list[dict]:
    """The ``⌊keep·len(rows)⌋`` least toxic scored rows, shuffled; rows need a ``toxicity`` field."""
    if not 0 < keep <= 1:
        raise DataError(f"--keep must be in (0, 1], got {keep}")
    for n, r in enumerate(rows, 1):
        if "toxicity" not in r:
            raise DataError(f"row {n} has no 'toxicity' field: score the file first (mwb score FILE.jsonl)")
    k = math.floor(keep * len(rows))
    scored = [r for r in rows if r["toxicity"] is not None]
    kept = sorted(scored, key=lambda r: float(r["toxicity"]))[:k]
    random.Random(seed).shuffle(kept)
    return kept
