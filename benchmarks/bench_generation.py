"""Generated tokens/s of batched generation (left-padded batches of 16 with the KV cache) against batch 1 on
the same prompts, through the one entry point :func:`mwb.evaluation.generation.generate`.

The model is a randomly initialised GPT (the bundled Shakespeare tokenizer's vocabulary, learned positions)
and the prompts are 16 passages of the bundled corpus of 16 different lengths; generation runs without
stopping at end of document, so every row produces exactly ``--max-tokens`` tokens and both settings do the
same work. Batch 1 and batch 16 alternate for ``--rounds`` rounds (so load from other processes on the
machine is spread over both); the table gives each setting's best and median tokens/s and the ratio of the
medians, all measured in this run. Greedy outputs of the two settings are checked to be equal.

    python benchmarks/bench_generation.py             # 4 layers × 256, 48 new tokens, 3 rounds
    python benchmarks/bench_generation.py --quick     # 2 layers × 128, 24 new tokens, 2 rounds
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time

import torch

from mwb.core.config import ModelConfig
from mwb.core.compose import build_model
from mwb.core.parallel import single_process_state
from mwb.core.tokenizers import load_tokenizer
from mwb.data import CORPUS_DIR
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.lm import LanguageModel


def corpus_prompts(tok, count: int, shortest: int, step: int) -> list[list[int]]:
    """``count`` token-id prompts of lengths ``shortest, shortest + step, …``: the starts of the first
    bundled-corpus passages long enough for them."""
    need = shortest + step * (count - 1)
    out: list[list[int]] = []
    with gzip.open(os.path.join(CORPUS_DIR, "shakespeare.jsonl.gz"), "rt") as f:
        for line in f:
            ids = tok.encode(json.loads(line)["text"])
            if len(ids) >= need:
                out.append(ids[: shortest + step * len(out)])
            if len(out) == count:
                return out
    raise SystemExit(f"the bundled corpus has fewer than {count} passages of {need} tokens")


def timed(lm, prompts, params, batch_size: int) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    gens = generate(lm, prompts, params, batch_size=batch_size)
    seconds = time.perf_counter() - start
    return sum(len(g.tokens) for g in gens) / seconds, [g.tokens for g in gens]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--sample", action="store_true", help="temperature 1, top-k 50, top-p 0.95 (seeded)")
    ap.add_argument("--quick", action="store_true", help="2 layers × 128, 24 new tokens, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.layers, args.hidden, args.heads, args.max_tokens, args.rounds = 2, 128, 4, 24, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = load_tokenizer(os.path.join(CORPUS_DIR, "tokenizer.json"))
    cfg = ModelConfig(num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                      max_position_embeddings=512, dropout=0.0, init_std=0.05)
    lm = LanguageModel(build_model(cfg, single_process_state(), tok.vocab_size, seed=1), tok)
    prompts = corpus_prompts(tok, args.batch_size, 8, 5)
    params = SamplingParams(max_tokens=args.max_tokens, stop_at_eod=False, seed=0,
                            **(dict(temperature=1.0, top_k=50, top_p=0.95) if args.sample else
                               dict(temperature=0.0)))
    timed(lm, prompts[:2], SamplingParams(max_tokens=2), 2)  # warm-up
    rates: dict[int, list[float]] = {1: [], args.batch_size: []}
    outputs = {}
    for _ in range(args.rounds):
        for b in rates:
            rate, outputs[b] = timed(lm, prompts, params, b)
            rates[b].append(rate)
    same = outputs[1] == outputs[args.batch_size]
    lengths = sorted(len(p) for p in prompts)
    print(f"model: {args.layers} layers × {args.hidden} hidden, vocab {tok.vocab_size}; "
          f"{len(prompts)} prompts of {lengths[0]}–{lengths[-1]} tokens, {args.max_tokens} new tokens each, "
          f"{'sampled' if args.sample else 'greedy'}; torch threads {torch.get_num_threads()}; "
          f"{args.rounds} rounds")
    print(f"{'batch size':>10} | {'best tok/s':>10} | {'median tok/s':>12} | {'ratio (median)':>14}")
    base = statistics.median(rates[1])
    for b, r in rates.items():
        med = statistics.median(r)
        print(f"{b:>10} | {max(r):>10.1f} | {med:>12.1f} | {med / base:>13.2f}x")
    print(f"batch {args.batch_size} outputs equal batch 1: {same}")


if __name__ == "__main__":
    main()
