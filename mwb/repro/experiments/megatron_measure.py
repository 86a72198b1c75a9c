"""The measurements behind ``megatron-scaling``: one layer's saved activation bytes (one rank, or TP + SP on
gloo ranks started by mwb's own launcher) and a single-process GPT training step under each recompute mode.

Not an experiment (it registers nothing): the module the experiment calls, kept apart so each file has one job.
"""
from __future__ import annotations

import json
import os
import time

import torch

from mwb.core.config import RunConfig, update
from mwb.core.errors import DataError
from mwb.core.plan import ModelShape, flops_per_iteration
from mwb.core.plan.measure import LayerCase, compare, measure_layer, measure_on_rank
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.launch import init_distributed, launch
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import DTYPES, Trainer

from ..api import CellResult

DROPOUT = 0.1  # the paper's GPT setting: dropout masks exist and the attention scores are stored


# ------------------------------------------------------------------------------------------ activations


def _check_device(device: str) -> None:
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DataError(f"this scale measures layers on {device}, and torch sees no CUDA device here "
                        f"(run --scale cpu, or --scale paper --set device=cpu with enough memory)")


def _rank_main(case: LayerCase, path: str) -> None:
    """One launched rank: measure the layer's shard; rank 0 writes every rank's bytes to ``path``."""
    import torch.distributed as dist
    rank, world, _ = init_distributed(timeout_s=300)
    (mine,) = measure_on_rank(rank, world, [case])
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(every, f)


def measure_sharded(case: LayerCase, workdir: str) -> list[int]:
    """Bytes each of ``case.t`` launched ranks keeps for its shard of the layer."""
    path = os.path.join(workdir, "per_rank.json")
    launch(_rank_main, case.t, case, path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def activation_cell(shape: tuple, t: int, sp: bool, mode: str, device: str, workdir: str) -> CellResult:
    """Measured bytes of one layer (per rank) next to the planner's accounting plus its named differences."""
    _check_device(device)
    s, b, h, a = shape
    case = LayerCase(s, b, h, a, t=t, sp=sp, recompute=mode, dropout=DROPOUT, attn_dropout=DROPOUT,
                     device=device)
    if t == 1:
        per_rank = [measure_layer(case).bytes]
    else:
        per_rank = measure_sharded(case, workdir)
        if len(set(per_rank)) != 1:  # the layer is split evenly: every shard keeps the same bytes
            raise DataError(f"{case.label}: ranks kept different activation bytes {per_rank}")
    row = compare(case, per_rank[0])
    return CellResult({"activation_bytes": float(per_rank[0]), "explained_bytes": float(row["explained"])},
                      details={"case": row["case"], "per_rank_bytes": per_rank, "planner_bytes": row["planner"],
                               "known_differences": row["differences"],
                               "measured_over_explained": row["ratio"]})


# ------------------------------------------------------------------------------------------- step time


def step_config(p: dict, recompute: str) -> RunConfig:
    return update(RunConfig(), {
        "model": {"num_layers": p["layers"], "hidden_size": p["hidden"], "num_attention_heads": p["heads"],
                  "vocab_size": p["vocab"], "max_position_embeddings": p["seq"], "dropout": 0.0},
        "parallel": {"recompute": recompute},
        "optim": {"lr": 1e-4, "lr_schedule": "constant"},
        "train": {"steps": 10**6, "micro_batch_size": p["batch"], "global_batch_size": p["batch"],
                  "seq_length": p["seq"], "precision": p["precision"]}})


def step_flops(p: dict, recompute: str) -> float:
    """The planner's FLOPs of one step (matmuls; recompute's extra forward included)."""
    cfg = step_config(p, recompute)
    return flops_per_iteration(ModelShape.from_config(cfg.model, p["seq"]), p["batch"], recompute)


def flop_ratio(p: dict, recompute: str) -> float:
    """FLOPs with ``recompute`` over FLOPs without: what the formulas say the step should cost, relatively."""
    return step_flops(p, recompute) / step_flops(p, "none")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _clock(device: str):
    """CPU: this process's CPU seconds (one intra-op thread, see :func:`step_cell`), which other processes on
    a shared machine do not inflate; CUDA: wall seconds after a synchronise."""
    return time.process_time if device == "cpu" else time.perf_counter


def gemm_rate(p: dict, device: str, reps: int = 5) -> float:
    """FLOP/s of this model's own matmuls (one layer's QKV, projection, FC1, FC2 and the logits for b·s
    tokens), best of ``reps``: the rate the planner's FLOPs are divided by."""
    dtype, clock = DTYPES[p["precision"]], _clock(device)
    n, h, v = p["batch"] * p["seq"], p["hidden"], p["vocab"]
    shapes = [(n, h, 3 * h), (n, h, h), (n, h, 4 * h), (n, 4 * h, h), (n, h, v)]
    mats = [(torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, o, dtype=dtype, device=device))
            for m, k, o in shapes]
    flops = sum(2 * m * k * o for m, k, o in shapes)
    best = float("inf")
    for _ in range(reps + 1):
        _sync(device)
        t0 = clock()
        for x, y in mats:
            torch.mm(x, y)
        _sync(device)
        best = min(best, clock() - t0)
    return flops / best


def step_cell(mode: str, p: dict, device: str) -> CellResult:
    """Fastest training step under ``mode`` and under no recompute, interleaved so that load on a shared
    machine hits both alike; predicted = the planner's FLOPs / :func:`gemm_rate` (the faster of a reading
    before and one after the steps). On CPU everything runs on
    one intra-op thread and is timed in process CPU seconds: with other processes on the cores, wall time
    measures their load, CPU time the step's own work."""
    _check_device(device)
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    try:
        return _time_steps(mode, p, device)
    finally:
        torch.set_num_threads(threads)


def _time_steps(mode: str, p: dict, device: str) -> CellResult:
    clock = _clock(device)
    rate_before = gemm_rate(p, device)
    modes = ("none",) if mode == "none" else ("none", mode)
    trainers = {m: Trainer(step_config(p, m), GPTSpec(step_config(p, m), p["vocab"]),
                           SyntheticTokens(p["vocab"], p["seq"], seed=0), device=device) for m in modes}
    times: dict = {m: [] for m in modes}
    for i in range(p["steps"] + 1):  # the first step of each is a warm-up
        for m, trainer in trainers.items():
            _sync(device)
            t0 = clock()
            trainer.train_step()
            _sync(device)
            if i:
                times[m].append(clock() - t0)
    del trainers
    rate = max(rate_before, gemm_rate(p, device))  # the machine's best: a slow reading is interference
    flops = step_flops(p, mode)
    best, best_none = min(times[mode]), min(times["none"])
    metrics = {"step_s": best, "predicted_step_s": flops / rate}
    if mode != "none":
        metrics["step_over_none"] = best / best_none
    return CellResult(metrics, details={"gemm_gflops": rate / 1e9, "flops": flops, "times_s": times[mode],
                                        "none_times_s": times["none"], "measured_over_predicted": best * rate / flops,
                                        "clock": "process CPU seconds, 1 thread" if device == "cpu" else "wall"})
