"""Search over parallel layouts: enumerate the valid ones, keep those that fit, rank by predicted time.

The space: tp among the divisors of the head count (and query groups, ffn size) up to a node's GPUs, pp
among the divisors of the layer count with tp·pp dividing the GPUs, dp = GPUs/(tp·pp), micro-batch sizes
dividing the per-replica batch, interleaving v with L divisible by p·v (and, as Megatron's interleaved
schedule requires, micro-batches divisible by p), sequence parallelism on/off when tp > 1, recompute
none/selective/full, distributed optimizer on/off when dp > 1. Anything the user fixed is not searched.
Layouts are ranked by predicted time, then larger micro-batch (faster kernels in reality, which the flat
efficiency does not see), then less memory.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Optional

from ..config import ModelConfig
from ..errors import MwbError
from ..parallel.dims import LayoutError
from .cost import CostModel, Estimate
from .formulas import RECOMPUTE_MODES
from .layout import Constraints, Hardware, Layout, Workload
from .memory import MemoryModel
from .model import ModelShape, ParamCount, count_parameters


@dataclass
class PlanResult:
    shape: ModelShape
    workload: Workload
    hardware: Hardware
    constraints: Constraints
    params: ParamCount
    cost: CostModel
    fits: list[Estimate] = field(default_factory=list)  # best first
    considered: int = 0  # valid layouts evaluated
    rejected: Counter = field(default_factory=Counter)  # reason → count
    smallest: Optional[Estimate] = None  # least memory of all valid layouts, fitting or not

    @property
    def best(self) -> Optional[Estimate]:
        return self.fits[0] if self.fits else None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_options(shape: ModelShape, workload: Workload, hw: Hardware, c: Constraints) -> list[int]:
    if c.tp is not None:
        return [c.tp]
    return [t for t in _divisors(min(hw.gpus_per_node, workload.gpus)) if workload.gpus % t == 0]


def structural_problem(shape: ModelShape, layout: Layout, workload: Workload) -> Optional[str]:
    """Why this layout cannot run this model and batch at all (None when it can)."""
    cfg, L = shape.cfg, shape.num_layers
    t, p, v = layout.tp, layout.pp, layout.vpp
    if workload.gpus % (t * p):
        return f"tp·pp does not divide {workload.gpus} GPUs"
    if cfg.num_attention_heads % t or cfg.query_groups % t:
        return "tp does not divide the attention heads / query groups"
    ffns = [cfg.ffn_size] + ([cfg.moe_ffn_hidden_size or cfg.ffn_size] if cfg.num_experts else [])
    if any(f % t for f in ffns):
        return "tp does not divide the ffn hidden size"
    if L % (p * v):
        return f"pp·vpp does not divide {L} layers"
    if layout.dp % layout.ep or (cfg.num_experts and cfg.num_experts % layout.ep):
        return f"ep {layout.ep} does not divide dp and the expert count"
    if layout.ep > 1 and not cfg.num_experts:
        return "expert parallelism needs a mixture-of-experts model"
    if workload.global_batch_size % (layout.dp * layout.micro_batch_size):
        return f"global batch {workload.global_batch_size} is not divisible by dp·micro-batch"
    if any(b % (layout.dp * layout.micro_batch_size) for b in workload.batch_sizes()):
        return "a ramp-up batch size is not divisible by dp·micro-batch"
    if layout.sp and (t == 1 or shape.seq_length % t):
        return "sequence parallelism needs tp > 1 dividing the sequence length"
    if layout.fsdp and (p > 1 or layout.ep > 1 or layout.distributed_optimizer):
        return "--fsdp shards over dp with pp 1, ep 1 and no distributed optimizer"
    if v > 1 and (p == 1 or any(layout.microbatches(b) % p for b in workload.batch_sizes())):
        return "interleaving needs pp > 1 and micro-batches divisible by pp"
    return None


def candidate_layouts(shape: ModelShape, workload: Workload, hw: Hardware,
                      c: Constraints) -> Iterator[Layout]:
    """Every combination the constraints allow (valid or not; :func:`structural_problem` filters)."""
    L = shape.num_layers
    for t in _tp_options(shape, workload, hw, c):
        for p in ([c.pp] if c.pp is not None else _divisors(L)):
            if workload.gpus % (t * p):
                yield Layout(tp=t, pp=p)  # reported as a reason
                continue
            d = workload.gpus // (t * p)
            vpps = [c.vpp] if c.vpp is not None else [x for x in _divisors(L // p if L % p == 0 else 1)
                                                       if x <= c.max_vpp and (x == 1 or p > 1)]
            mbss = [c.micro_batch_size] if c.micro_batch_size is not None else list(c.micro_batch_sizes)
            sps = [c.sp] if c.sp is not None else ([False, True] if t > 1 else [False])
            recs = [c.recompute] if c.recompute is not None else list(RECOMPUTE_MODES)
            dops = ([c.distributed_optimizer] if c.distributed_optimizer is not None
                    else ([False, True] if d > 1 and not c.fsdp else [False]))
            for v in vpps:
                for b in mbss:
                    for sp in sps:
                        for r in recs:
                            for do in dops:
                                yield Layout(t, p, d, v, c.ep, b, sp, r, do, c.fsdp)


def search(cfg: ModelConfig, workload: Workload, hw: Hardware, constraints: Constraints = Constraints(),
           seq_length: Optional[int] = None) -> PlanResult:
    """Evaluate every valid layout; never raises for "nothing fits" (see :func:`plan`)."""
    shape = ModelShape.from_config(cfg, seq_length or cfg.max_position_embeddings)
    mem = MemoryModel(shape, workload.global_batch_size, workload.precision, constraints.flash_attention)
    cost = CostModel(mem, hw)
    result = PlanResult(shape, workload, hw, constraints, count_parameters(shape), cost)
    capacity = hw.usable_bytes
    for layout in candidate_layouts(shape, workload, hw, constraints):
        problem = structural_problem(shape, layout, workload)
        if problem:
            result.rejected[problem] += 1
            continue
        result.considered += 1
        memory = mem.peak(layout)
        if memory.total > capacity:
            result.rejected["does not fit in memory"] += 1
            if result.smallest is None or memory.total < result.smallest.memory.total:
                result.smallest = cost.estimate(layout, memory)
            continue
        est = cost.estimate(layout, memory)
        result.fits.append(est)
        if result.smallest is None or memory.total < result.smallest.memory.total:
            result.smallest = est
    result.fits.sort(key=lambda e: (round(e.time_s, 9), -e.layout.micro_batch_size, e.memory.total))
    return result


def plan(cfg: ModelConfig, workload: Workload, hw: Hardware, constraints: Constraints = Constraints(),
         seq_length: Optional[int] = None) -> PlanResult:
    """:func:`search`, raising a one-line error when no layout is valid (usage) or none fits (runtime)."""
    result = search(cfg, workload, hw, constraints, seq_length)
    if result.fits:
        return result
    if result.considered == 0:
        reasons = "; ".join(f"{r} ({n}×)" for r, n in result.rejected.most_common(3))
        fixed = {k: getattr(constraints, k) for k in ("tp", "pp", "vpp", "sp", "micro_batch_size")
                 if getattr(constraints, k) not in (None, False)}
        msg = f"no valid layout of {workload.gpus} GPUs for this model and batch: {reasons}"
        if fixed:
            raise LayoutError(msg + f" (fixed: {', '.join(f'{k}={v}' for k, v in fixed.items())})")
        raise MwbError(msg + "; change --gpus or --global-batch-size")
    s = result.smallest
    need = s.memory.total / 2**30
    raise MwbError(
        f"nothing fits in {hw.memory_gib:g} GiB per GPU ({hw.memory_reserve_gib:g} GiB reserved): the smallest "
        f"footprint of {result.considered} valid layouts is {need:.1f} GiB ({s.layout.short()}); use more "
        f"--gpus, GPUs with more --gpu-memory, or leave --recompute/--distributed-optimizer/--tp/--pp free")
