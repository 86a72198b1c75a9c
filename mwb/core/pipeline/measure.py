"""Measure what a pipeline schedule costs in activation memory and in idle time, on real ranks.

Two numbers decide between pipeline schedules (Narayanan et al. 2021):

* **Micro-batches in flight**: how many micro-batches' activations a stage holds at once. Measured, not
  assumed: every tensor autograd saves during a forward is tagged (``saved_tensors_hooks``) with its
  (chunk, micro-batch); the tag dies when autograd frees the tensor after that micro-batch's backward.
  The peak count of distinct live tags is the number in flight: ``min(pp - rank, m)`` for 1F1B, ``m`` for
  GPipe; interleaving counts chunk-micro-batches, each 1/vpp of a stage's activations.
* **Bubble**: idle time over busy time of a stage, theory ``(pp-1)/m`` for 1F1B and GPipe and
  ``(pp-1)/(vpp·m)`` for interleaved 1F1B. Busy time is the time spent inside forward/backward
  computations; idle is the rest of the step's wall time. On a small CPU machine ranks share cores and real
  compute would measure contention rather than the schedule, so :func:`add_compute_cost` gives each layer
  an artificial cost (a sleep in forward and, twice as long, in backward) that dominates the tiny model's
  compute and the communication, the way a large layer's compute dominates on a GPU. What remains above
  theory is the latency of each exchange between slots (a gloo receive is matched only once posted); it
  weighs more with interleaving, which has vpp× as many, shorter slots: the communication Megatron trades
  for the smaller bubble.

:func:`measure_rank` runs inside an initialised process group of ``pp`` ranks (tests call it through their
spawn helper); :func:`run_measurement` launches the ranks itself (the benchmark script).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..config import ModelConfig, ParallelConfig, RunConfig, TrainConfig
from ..parallel.dims import ParallelDims
from ..parallel.random import seed_everything
from ..parallel.stages import rank_stages
from ..parallel.state import build_state
from ..training.batches import SyntheticTokens, get_microbatches
from ..training.model_spec import GPTSpec
from .orders import simulate
from .schedules import make_schedule

VOCAB = 128


# ------------------------------------------------------------------------------------------- observing


class _Sleep(torch.autograd.Function):
    """Identity that takes ``fwd_s`` seconds forwards and ``bwd_s`` backwards."""

    @staticmethod
    def forward(ctx, x, fwd_s, bwd_s):
        ctx.bwd_s = bwd_s
        time.sleep(fwd_s)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.bwd_s)
        return g, None, None


def add_compute_cost(chunk: nn.Module, fwd_s: float, bwd_s: float) -> None:
    """Make every transformer layer of ``chunk`` take at least ``fwd_s`` / ``bwd_s`` seconds."""
    for layer in chunk.layers.values():
        layer.register_forward_hook(lambda mod, args, out: _Sleep.apply(out, fwd_s, bwd_s))


class _Tag:
    __slots__ = ("key", "tensor", "owner")

    def __init__(self, key, tensor, owner):
        self.key, self.tensor, self.owner = key, tensor, owner
        owner.live[key] = owner.live.get(key, 0) + 1

    def __del__(self):
        self.owner.live[self.key] -= 1


class StageObserver:
    """Executor observer: times each computation and tags what its forward saves for backward."""

    def __init__(self) -> None:
        self.live: dict[tuple, int] = {}
        self.peak = 0
        self.busy = 0.0
        self.events: list[tuple[str, int, int, float, float]] = []

    def in_flight(self) -> int:
        return sum(1 for n in self.live.values() if n > 0)

    @contextlib.contextmanager
    def compute(self, kind: str, chunk: int, mb: int):
        key = (chunk, mb)
        hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: _Tag(key, t, self), lambda tag: tag.tensor) \
            if kind == "F" else contextlib.nullcontext()
        t0 = time.perf_counter()
        with hooks:
            yield
        t1 = time.perf_counter()
        self.busy += t1 - t0
        self.events.append((kind, chunk, mb, t0, t1))
        self.peak = max(self.peak, self.in_flight())


# ------------------------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Setup:
    pp: int
    vpp: int
    microbatches: int
    order: str = "1f1b"  # 1f1b (interleaved when vpp > 1) | gpipe
    num_layers: int = 8
    hidden: int = 32
    seq: int = 16
    layer_fwd_s: float = 0.004  # artificial per-layer cost; backward takes twice as long
    repeats: int = 1  # timed runs after one warm-up run; the fastest is kept

    def theory_bubble(self) -> float:
        return (self.pp - 1) / (self.vpp * self.microbatches)


def _build(setup: Setup, state):
    cfg = RunConfig(model=ModelConfig(num_layers=setup.num_layers, hidden_size=setup.hidden, num_attention_heads=4,
                                      dropout=0.0, max_position_embeddings=setup.seq),
                    parallel=ParallelConfig(pp=setup.pp, vpp=setup.vpp),
                    train=TrainConfig(micro_batch_size=1, global_batch_size=setup.microbatches,
                                      seq_length=setup.seq, seed=1))
    spec = GPTSpec(cfg, VOCAB)
    stages = rank_stages(setup.num_layers, setup.pp, setup.vpp, state.pp_rank)
    chunks = [spec.build_chunk(state, st, "cpu", torch.float32) for st in stages]
    data = SyntheticTokens(VOCAB, setup.seq, seed=3)
    mbs = get_microbatches(data, 0, setup.microbatches, 1, 1, 0)
    return spec, chunks, mbs


def measure_rank(rank: int, world: int, setups: list[Setup]) -> list[dict]:
    """For each setup, on this rank: peak micro-batches in flight, busy and wall time of the step, bubble.
    Needs an initialised process group whose world size is the setups' ``pp``."""
    out = []
    for setup in setups:
        if world != setup.pp:
            raise ValueError(f"measurement of pp {setup.pp} needs {setup.pp} ranks, got {world}")
        state = build_state(ParallelDims(world_size=world, pp=setup.pp, vpp=setup.vpp))
        seed_everything(1, 0, state.pp_rank)
        spec, chunks, mbs = _build(setup, state)
        for c in chunks:
            add_compute_cost(c, setup.layer_fwd_s, 2 * setup.layer_fwd_s)
        schedule = make_schedule(setup.order)
        best = None
        for rep in range(setup.repeats + 1):
            obs = StageObserver()
            dist.barrier()
            t0 = time.perf_counter()
            schedule(chunks, mbs, spec, state, 1.0 / (setup.seq * setup.microbatches), observer=obs,
                     seq_length=setup.seq, micro_batch_size=1)
            wall = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(wall, op=dist.ReduceOp.MAX)  # the step ends when the slowest stage ends
            result = {"peak_in_flight": obs.peak, "busy_s": obs.busy, "wall_s": float(wall),
                      "bubble": (float(wall) - obs.busy) / obs.busy}
            if rep > 0 and (best is None or result["wall_s"] < best["wall_s"]):
                best = result
        for c in chunks:
            c.zero_grad(set_to_none=True)
        out.append(best)
    return out


def summarize(setup: Setup, per_rank: list[dict]) -> dict:
    """Measured numbers next to the paper model (:func:`~.orders.simulate` with the same costs)."""
    sim = simulate(setup.order, setup.pp, setup.vpp, setup.microbatches)
    return {"setup": setup,
            "in_flight": [r["peak_in_flight"] for r in per_rank],
            "in_flight_model": sim.peak_in_flight,
            "bubble": sum(r["bubble"] for r in per_rank) / len(per_rank),
            "bubble_model": sum(sim.bubble(r) for r in range(setup.pp)) / setup.pp,
            "bubble_theory": setup.theory_bubble(),
            "wall_s": per_rank[0]["wall_s"]}


# --------------------------------------------------------------------------------------------- launching


def _launched(setups: list[Setup]) -> list[dict]:
    from ..training.launch import init_distributed
    torch.set_num_threads(1)
    rank, world, _ = init_distributed(timeout_s=120)
    return measure_rank(rank, world, setups)


def run_measurement(setups: list[Setup]) -> list[dict]:
    """Launch ``pp`` local ranks (torch's elastic launcher) per distinct pp and summarise every setup."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    import uuid

    from ..training.launch import free_port
    results: list = [None] * len(setups)
    for pp in sorted({s.pp for s in setups}):
        idx = [i for i, s in enumerate(setups) if s.pp == pp]
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=pp, run_id=uuid.uuid4().hex[:8],
                           rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                           monitor_interval=0.2, start_method="spawn")
        per_rank = elastic_launch(cfg, _launched)([setups[i] for i in idx])
        for j, i in enumerate(idx):
            results[i] = summarize(setups[i], [per_rank[r][j] for r in range(pp)])
    return results
