"""Two rows for issue 45: DP 2 with and without ``--fsdp`` (model-state bytes and peak RSS per rank, tokens/s),
and the step-time stall of a checkpoint save, synchronous against ``--async-save``.

FSDP row: the same GPT trained for ``--steps`` steps on 2 gloo ranks, plain data parallelism (replicated
weights, gradients and Adam state) and then FSDP2. "states" is what a rank holds between steps, counted
exactly (its parameters, gradients and optimizer tensors); "peak RSS" is the rank's ``ru_maxrss`` (the whole
process: PyTorch, the data, the gathered blocks and activations). Tokens/s is over the steps after the first.
Ratios are against the plain run of this invocation.

Save row: one process, a save after every step; "stall" is how long ``checkpoint.save`` holds the training
thread (sync: the whole write; async: the CPU copy and the bookkeeping), median over the saves. The
background write of the async run still costs CPU, which on a loaded machine shows in its step time.

    python benchmarks/bench_fsdp_async_save.py            # 4 layers × 256, seq 128, 6 steps
    python benchmarks/bench_fsdp_async_save.py --quick    # 2 layers × 128, seq 64, 4 steps
"""
from __future__ import annotations

import argparse
import datetime
import os
import resource
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp


def _tree(args, fsdp: bool = False, async_save: bool = False) -> dict:
    return {"model": {"num_layers": args.layers, "hidden_size": args.hidden, "num_attention_heads": 4,
                      "dropout": 0.0, "max_position_embeddings": args.seq, "vocab_size": 512},
            "train": {"steps": args.steps, "micro_batch_size": 2, "global_batch_size": 8, "seq_length": args.seq,
                      "seed": 1, "async_save": async_save},
            "parallel": {"fsdp": fsdp}}


def _trainer(tree: dict, world: int):
    from mwb.core.config import RunConfig, update
    from mwb.core.training.batches import SyntheticTokens
    from mwb.core.training.spec import GPTSpec
    from mwb.core.training.trainer import Trainer
    cfg = update(RunConfig(), tree)
    return Trainer(cfg, GPTSpec(cfg, 512), SyntheticTokens(512, cfg.train.seq_length, seed=7), world_size=world)


def _state_bytes(trainer) -> int:
    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t
    seen, n = set(), 0
    for p in trainer.model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n += local(p).numel() * local(p).element_size()
        if p.grad is not None:
            n += local(p.grad).numel() * local(p.grad).element_size()
    opt = getattr(trainer.optimizer, "optimizer", None)
    for buf in getattr(trainer.optimizer, "buffers", []):  # the flat optimizer's fp32 gradient buffer
        n += buf.grads.numel() * buf.grads.element_size()
    for st in (opt.state.values() if opt is not None else []):
        for v in st.values():
            if torch.is_tensor(v):
                n += local(v).numel() * local(v).element_size()
    return n


def _rank(rank: int, world: int, port: int, tree: dict, out) -> None:
    import torch.distributed as dist
    import torch.distributed.fsdp  # noqa: F401  (before init)
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    trainer = _trainer(tree, world)
    times, tokens = [], 0
    for i in range(tree["train"]["steps"]):
        res = trainer.train_step()
        if i:
            times.append(res.seconds)
            tokens += res.tokens
    out.put((rank, _state_bytes(trainer), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             tokens / sum(times)))
    dist.barrier()
    out.close()
    out.join_thread()
    os._exit(0)


def dp2(tree: dict) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, 2, port, tree, q)) for r in range(2)]
    for p in procs:
        p.start()
    rows = sorted(q.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join()
    return {"states": max(r[1] for r in rows), "rss": max(r[2] for r in rows), "tok_s": rows[0][3]}


def save_stall(args, async_save: bool) -> dict:
    from mwb.core import checkpoint
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    trainer = _trainer(_tree(args, async_save=async_save), 1)
    stalls, steps = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.steps):
            steps.append(trainer.train_step().seconds)
            t0 = time.perf_counter()
            checkpoint.save(trainer, os.path.join(d, "ck"), keep_last=1)
            stalls.append(time.perf_counter() - t0)
        checkpoint.wait_for_save(trainer)
    return {"stall": statistics.median(stalls), "step": statistics.median(steps[1:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args()
    args.layers, args.hidden, args.seq = (2, 128, 64) if args.quick else (4, 256, 128)
    args.steps = args.steps or (4 if args.quick else 6)
    print(f"# {args.layers} layers × {args.hidden}, seq {args.seq}, vocab 512, global batch 8, {args.steps} steps; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    plain, fsdp = dp2(_tree(args)), dp2(_tree(args, fsdp=True))
    print("| DP 2 | states/rank MiB | peak RSS/rank MiB | tokens/s |")
    print("|---|---|---|---|")
    for name, r in (("plain DP", plain), ("--fsdp", fsdp)):
        print(f"| {name} | {r['states'] / 2**20:.2f} ({r['states'] / plain['states']:.2f}×) | "
              f"{r['rss'] / 2**20:.0f} ({r['rss'] / plain['rss']:.2f}×) | {r['tok_s']:.0f} "
              f"({r['tok_s'] / plain['tok_s']:.2f}×) |")
    sync, asy = save_stall(args, False), save_stall(args, True)
    print("\n| save after every step | stall per save ms | step ms |")
    print("|---|---|---|")
    for name, r in (("sync", sync), ("--async-save", asy)):
        print(f"| {name} | {1e3 * r['stall']:.1f} ({r['stall'] / sync['stall']:.2f}×) | {1e3 * r['step']:.1f} |")
    print(f"# load at the end {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
