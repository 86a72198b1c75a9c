"""Serving throughput: ``mwb serve``'s engine (continuous batching, preallocated KV cache) under N concurrent
clients against the same requests sent one at a time, and mwb's batch-16 generation against
``transformers.generate`` at batch 16 on the same model and prompts. Every ratio is measured in this run.

1. **Concurrent clients.** The server runs in this process (its HTTP threads and the engine's scheduler
   thread); ``--requests`` streamed ``/v1/completions`` requests (passages of the bundled corpus of different
   lengths, greedy, ``--max-tokens`` each) are sent by N client threads (``--clients``, default 1, 4, 16, 64;
   N = 1 is one request at a time). Per N: requests/s, generated tokens/s, time to first token p50/p95
   (first streamed text), and the ratios to N = 1; the texts are checked to equal N = 1's.
   ``--serving-rounds R`` passes over the client counts R times and reports medians, with each round's own
   ratio, so that a change in the machine's speed during the run does not fall on one N only.
2. **Batch 16.** The first 16 prompts through :func:`mwb.evaluation.generation.generate` at batch 16 and
   through ``transformers.generate`` on the same left-padded batch (the mwb checkpoint exported with
   ``mwb_to_hf``), greedy with no end-of-document stop so both do the same work; ``--rounds`` alternating
   rounds, best and median tokens/s, the ratio of medians and how many rows' tokens agree. On CPU mwb runs
   twice per round: with its linears packed for oneDNN (how ``mwb serve`` loads a model,
   :mod:`mwb.core.models.packed_linear`) and as plain ``F.linear`` (MKL, what ``transformers`` calls).

``--no-pack`` serves with plain ``F.linear`` linears (the engine alone, without the packed GEMMs).

    python benchmarks/bench_serving.py            # smollm2-135m (installed named model), 64 requests × 32 tokens
    python benchmarks/bench_serving.py --quick    # tiny random Llama-shaped model, seconds: a smoke test

The load average is printed before and after, and the CPU steal time of the run (time the hypervisor gave to
other guests): on a shared machine the figures are only as good as it is quiet.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import torch

from mwb.core.checkpoint import write_model_checkpoint
from mwb.core.compose import build_model
from mwb.core.config import RunConfig, update
from mwb.core.convert import mwb_to_hf
from mwb.core.models.packed_linear import pack_linears, unpack_linears
from mwb.core.named_models import local_checkpoint
from mwb.core.parallel.state import single_process_state
from mwb.data import CORPUS_DIR
from mwb.evaluation.engine import EngineConfig
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.loading import load_language_model
from mwb.evaluation.server import Limits, make_server

TINY = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2,
        "ffn_hidden_size": 128, "position_embedding": "rope", "normalization": "rmsnorm", "activation": "swiglu",
        "bias": False, "tie_embeddings": True, "dropout": 0.0, "init_std": 0.2, "max_position_embeddings": 512}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def steal_seconds() -> float:
    """CPU time the hypervisor gave to other guests (``/proc/stat``, all cores), 0 where not reported: on a
    shared cloud machine it tells a slow run from a slow program."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def corpus_passages(count: int, shortest: int, step: int) -> list[str]:
    """``count`` passages of the bundled corpus cut to ``shortest, shortest + step, …`` characters."""
    out: list[str] = []
    with gzip.open(os.path.join(CORPUS_DIR, "shakespeare.jsonl.gz"), "rt") as f:
        for line in f:
            text = json.loads(line)["text"]
            want = shortest + step * (len(out) % 16)
            if len(text) >= want:
                out.append(text[:want])
            if len(out) == count:
                return out
    raise SystemExit(f"the bundled corpus has fewer than {count} passages long enough")


def tiny_checkpoint(directory: str) -> str:
    """A random tiny Llama-shaped mwb checkpoint with the bundled tokenizer (``--quick``)."""
    from mwb.core.tokenizers import load_tokenizer
    tok_path = os.path.join(CORPUS_DIR, "tokenizer.json")
    vocab = load_tokenizer(tok_path).vocab_size
    cfg = update(RunConfig(), {"model": {**TINY, "vocab_size": vocab}})
    net = build_model(cfg.model, single_process_state(), vocab, seed=1)
    tensors = {k: (v[:vocab] if k.endswith("word.weight") else v) for k, v in net.state_dict().items()
               if not k.endswith("head.weight")}
    return write_model_checkpoint(directory, cfg, vocab, tensors, extra_files={"tokenizer": tok_path})


# ------------------------------------------------------------------------------------------ part 1


def stream_one(base: str, prompt: str, max_tokens: int) -> tuple[float, float, str, int]:
    """(seconds to the first text, seconds in all, text, completion tokens) of one streamed request."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first, text, tokens = None, "", 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for c in event["choices"]:
                if c["text"] and first is None:
                    first = time.perf_counter() - start
                text += c["text"]
    total = time.perf_counter() - start
    return (first if first is not None else total), total, text, tokens


def run_clients(base: str, prompts: list[str], clients: int, max_tokens: int) -> dict:
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda p: stream_one(base, p, max_tokens), prompts))
    wall = time.perf_counter() - start
    ttft = sorted(r[0] for r in results)
    return {"wall": wall, "rps": len(prompts) / wall, "tps": sum(r[3] for r in results) / wall,
            "p50": statistics.median(ttft), "p95": ttft[min(len(ttft) - 1, int(round(0.95 * (len(ttft) - 1))))],
            "texts": [r[2] for r in results]}


def serving_table(lm, prompts: list[str], clients: list[int], max_tokens: int, config: EngineConfig,
                  rounds: int = 1) -> None:
    """``rounds`` passes over the client counts (1, 4, 16, … then again), so a drift in the machine's speed
    reaches every count alike; per count the medians over rounds, and the ratio to the first count both of
    the medians and within each round."""
    server = make_server(lm, "127.0.0.1", 0, limits=Limits(max_prompts=1), quiet=True, engine_config=config)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://%s:%d" % server.server_address[:2]
    runs: dict[int, list[dict]] = {n: [] for n in clients}
    try:
        stream_one(base, prompts[0], 2)  # warm-up
        for _ in range(rounds):
            for n in clients:
                runs[n].append(run_clients(base, prompts, n, max_tokens))
    finally:
        server.shutdown()
        server.server_close()
    ref_texts = runs[clients[0]][0]["texts"]
    ref_rps = statistics.median(r["rps"] for r in runs[clients[0]])
    print(f"\n{len(prompts)} streamed requests × {max_tokens} tokens (greedy); engine: {config.batch_rows} rows, "
          f"{config.prefill_tokens} prefill tokens per pass; {rounds} round(s) over the client counts, medians\n")
    print("| clients | wall (s) | requests/s | tokens/s | TTFT p50 (s) | TTFT p95 (s) | requests/s ratio | "
          "ratio in each round | texts equal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall", "rps", "tps", "p50", "p95")}
        each = ", ".join(f"{r['rps'] / b['rps']:.2f}x" for r, b in zip(rs, runs[clients[0]]))
        same = min(sum(a == b for a, b in zip(r["texts"], ref_texts)) for r in rs)
        print(f"| {n} | {med['wall']:.1f} | {med['rps']:.2f} | {med['tps']:.1f} | {med['p50']:.2f} | "
              f"{med['p95']:.2f} | {med['rps'] / ref_rps:.2f}x | {each} | {same}/{len(prompts)} |", flush=True)


# ------------------------------------------------------------------------------------------ part 2


def batch_table(lm, hf, prompts: list[str], max_tokens: int, rounds: int) -> None:
    """mwb at batch 16 with its linears as loaded (oneDNN-packed on CPU) and as plain ``F.linear``, against
    ``transformers.generate``: the second row tells the packed GEMMs' share of the ratio from the rest."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, stop_at_eod=False)
    rows = [lm.encode(p) for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows], device=lm.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=lm.device)
    packed = bool(lm.packed_linears)
    names = (["mwb (packed linears)", "mwb (F.linear)"] if packed else ["mwb"]) + ["transformers"]
    rates: dict[str, list[float]] = {n: [] for n in names}
    tokens: dict[str, list] = {}

    def ours() -> list:
        return [g.tokens for g in generate(lm, prompts, params, batch_size=len(prompts))]

    def theirs() -> list:
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
        return out[:, width:].tolist()

    for _ in range(rounds):
        for name in names:
            if name == "mwb (F.linear)":
                unpack_linears(lm.model)
            t0 = time.perf_counter()
            tokens[name] = theirs() if name == "transformers" else ours()
            rates[name].append(sum(map(len, tokens[name])) / (time.perf_counter() - t0))
            if name == "mwb (F.linear)":
                pack_linears(lm.model)
    print(f"\nbatch {len(prompts)}: {len(prompts)} prompts of {min(map(len, rows))}–{width} tokens, {max_tokens} "
          f"new tokens each (greedy, no stop), {rounds} alternating rounds\n")
    print("| generator | best tokens/s | median tokens/s | ratio (medians) | rows with transformers' tokens |")
    print("| --- | --- | --- | --- | --- |")
    base = statistics.median(rates["transformers"])
    for name, r in rates.items():
        same = sum(a == b for a, b in zip(tokens[name], tokens["transformers"]))
        print(f"| {name} | {max(r):.1f} | {statistics.median(r):.1f} | {statistics.median(r) / base:.2f}x | "
              f"{same}/{len(prompts)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="smollm2-135m")
    ap.add_argument("--clients", default="1,4,16,64", help="comma-separated client counts (the first is the base)")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--batch-rows", type=int, default=EngineConfig.batch_rows)
    ap.add_argument("--prefill-tokens", type=int, default=EngineConfig.prefill_tokens)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the batch-16 comparison")
    ap.add_argument("--serving-rounds", type=int, default=1, help="passes over the client counts (medians)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (fp32 either way)")
    ap.add_argument("--skip-transformers", action="store_true", help="only the serving table")
    ap.add_argument("--no-pack", action="store_true", help="plain F.linear linears (default on CPU: oneDNN-packed)")
    ap.add_argument("--quick", action="store_true", help="tiny random model, 8 requests × 8 tokens, clients 1,4")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.requests, args.max_tokens, args.rounds = "1,4", 8, 8, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    clients = [int(c) for c in args.clients.split(",")]
    steal_start = steal_seconds()
    tmp = tempfile.mkdtemp(prefix="mwb-bench-serving-")
    try:
        ckpt = tiny_checkpoint(os.path.join(tmp, "tiny")) if args.quick else local_checkpoint(args.checkpoint)
        print(f"model {'tiny random (--quick)' if args.quick else args.checkpoint} on {args.device}; torch "
              f"threads {torch.get_num_threads()}; load average {load_average()}", flush=True)
        _, lm = load_language_model(ckpt, device=torch.device(args.device),
                                    pack_weights=False if args.no_pack else None)
        print(f"linears packed for oneDNN: {lm.packed_linears}", flush=True)
        prompts = corpus_passages(args.requests, 40, 30)
        config = EngineConfig(batch_rows=args.batch_rows, prefill_tokens=args.prefill_tokens)
        serving_table(lm, prompts, clients, args.max_tokens, config, args.serving_rounds)
        if not args.skip_transformers:
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging
            hf_logging.disable_progress_bar()
            hf_dir, _ = mwb_to_hf(ckpt, os.path.join(tmp, "hf"))
            hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).to(args.device).eval()
            batch_table(lm, hf, prompts[:16], args.max_tokens, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at the end {load_average()}; CPU steal time during the run "
          f"{steal_seconds() - steal_start:.1f} s (all cores)")


if __name__ == "__main__":
    main()
