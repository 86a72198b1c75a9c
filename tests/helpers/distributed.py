"""Spawn N gloo ranks on 127.0.0.1, run a function on each, return their results or re-raise a failure.

One process per rank (spawn start method, so no state leaks from the test process), one intra-op thread
per rank (2 cores are shared by all ranks), a free port per call, and a deadline: a rank that hangs or dies
makes the call fail with that rank named instead of blocking the suite. Workers end with ``os._exit``
after reporting, which avoids the exit-time aborts gloo processes can hit during interpreter teardown.
"""
from __future__ import annotations

import datetime
import os
import pickle
import queue
import socket
import sys
import time
import traceback

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, fn, args, results, timeout_s):
    code = 0
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.nn.functional  # noqa: F401  (before init: see ENVIRONMENT.md)
        import torch.distributed.fsdp  # noqa: F401  (before init, as the launcher does)
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        # Plain pickle: torch's queue pickler would share tensors through file descriptors that vanish
        # when this process exits.
        results.put((rank, True, pickle.dumps(fn(rank, world, *args))))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
        code = 1
    finally:
        results.close()
        results.join_thread()  # the queue's feeder thread must flush before os._exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_ranks(fn, world: int, *args, timeout_s: float = 180.0) -> list:
    """``[fn(rank, world, *args) for each rank]``, computed in ``world`` gloo processes."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, fn, args, results, timeout_s), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    out, deadline = {}, time.monotonic() + timeout_s
    try:
        while len(out) < world:
            try:
                rank, ok, value = results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in out]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} died with exit code {procs[dead[0]].exitcode}")
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world)) - set(out))
                    raise TimeoutError(f"ranks {missing} did not finish within {timeout_s:.0f} s")
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            out[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world)]
