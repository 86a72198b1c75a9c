"""A simple time-per-iteration model, good enough to rank layouts, with every assumption stated.

    compute   = FLOPs(recompute mode) / (GPUs · peak · efficiency)          evenly spread over ranks
    per micro-batch on a stage:  t_mb = compute/m + TP comm + EP all-to-all + PP p2p     (critical path)
    pipeline  = m · t_mb · (1 + bubble),  bubble = (p−1)/(v·m)
    time      = pipeline + exposed DP comm + nothing else (optimizer step, data loading, launch gaps ignored)

Communication, bytes sent per rank, at ring-collective cost (all-reduce 2·(n−1)/n·N, all-gather and
reduce-scatter (n−1)/n·N), over ``intra_node_bw`` when the group fits in a node and ``inter_node_bw`` when
it crosses nodes (ranks are laid out tp fastest, then ep/dp, then pp):

* TP: per block and pass 2 all-reduces of the b·s·h activation (with sequence parallelism the equal-volume
  all-gather + reduce-scatter pairs); 2 passes (forward, backward), 3 with full recompute. Blocking.
* EP: per MoE block and pass, a dispatch and a combine all-to-all of k·b·s·h·(ep−1)/ep. Blocking.
* PP: per micro-batch and model chunk, the b·s·h activation forward and its gradient backward, 1/t of it
  when tp > 1 (Narayanan et al.'s scatter/gather optimisation, or the sequence-parallel shard). Blocking.
* DP: the gradient all-reduce 2·(d−1)/d·P·(grad bytes), or with the distributed optimizer a reduce-scatter of
  the grads and an all-gather of the updated weights ((d−1)/d·P·(grad + weight bytes)). Gradients are
  reduced as they are stored (fp32 main grads for bf16). Only partly hidden: the reduction overlaps the
  backward pass of the last micro-batch, the weight all-gather the forward of the first; the rest is exposed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .formulas import STATE_BYTES, pipeline_bubble
from .layout import Hardware, Layout
from .memory import Memory, MemoryModel
from .model import flops_per_iteration, stage_layers


@dataclass(frozen=True)
class Comm:
    """Bytes each rank sends per iteration and the seconds they cost, per group."""

    tp_bytes: float = 0.0
    tp_s: float = 0.0
    ep_bytes: float = 0.0
    ep_s: float = 0.0
    pp_bytes: float = 0.0
    pp_s: float = 0.0
    dp_bytes: float = 0.0
    dp_s: float = 0.0
    dp_exposed_s: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Estimate:
    """A layout with its memory, communication and predicted time per iteration."""

    layout: Layout
    memory: Memory
    comm: Comm
    microbatches: int
    bubble: float
    flops: float  # executed this iteration (with this layout's recompute)
    compute_s: float  # FLOPs / (GPUs · peak · efficiency), no bubble
    time_s: float
    paper_flops: float  # the full-recompute count the paper reports throughput with
    model_flops: float  # the no-recompute count of MFU
    peak_tflops: float

    @property
    def tflops_per_gpu(self) -> float:
        """Throughput counted as Narayanan et al. do (full-recompute FLOPs, whatever is executed)."""
        return self.paper_flops / (self.layout.gpus * self.time_s) / 1e12

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.layout.gpus * self.time_s) / (self.peak_tflops * 1e12)

    def as_dict(self) -> dict:
        return {"layout": self.layout.as_dict(), "memory": self.memory.as_dict(), "comm": self.comm.as_dict(),
                "microbatches": self.microbatches, "bubble": self.bubble, "flops": self.flops,
                "compute_s": self.compute_s, "time_s": self.time_s, "tflops_per_gpu": self.tflops_per_gpu,
                "mfu": self.mfu}


def _bandwidth(hw: Hardware, span: int) -> float:
    """Bytes/s of a group whose members lie within ``span`` consecutive ranks."""
    return (hw.intra_node_bw if span <= hw.gpus_per_node else hw.inter_node_bw) * 1e9


class CostModel:
    """Predicts time per iteration for layouts of one model, workload and cluster."""

    def __init__(self, memory: MemoryModel, hw: Hardware) -> None:
        self.mem, self.hw = memory, hw
        shape = memory.shape
        self.shape = shape
        B = memory.global_batch
        self._flops = {mode: flops_per_iteration(shape, B, mode) for mode in ("none", "selective", "full")}
        self.w_bytes, self.g_bytes, _ = STATE_BYTES[memory.precision]

    def flops(self, recompute: str) -> float:
        return self._flops[recompute]

    def estimate(self, layout: Layout, memory: Memory | None = None) -> Estimate:
        hw, shape, mem = self.hw, self.shape, self.mem
        memory = memory or mem.peak(layout)
        t, p, v, ep = layout.tp, layout.pp, layout.vpp, layout.ep
        m = layout.microbatches(mem.global_batch)
        flops = self._flops[layout.recompute]
        compute = flops / (layout.gpus * hw.peak_tflops * 1e12 * hw.efficiency)
        compute_mb = compute / m

        # activation message of one micro-batch, and the blocks on the busiest rank
        n = layout.micro_batch_size * shape.seq_length * shape.h * mem.act_bytes
        held = stage_layers(shape.num_layers, p, v, 0)
        blocks = sum(mem.layers[i].attention_blocks for i in held)
        moe_blocks = sum(1 for i in held if mem.layers[i].moe)
        passes = 3 if layout.recompute == "full" else 2

        tp_mb = blocks * passes * 2 * (2 * (t - 1) / t) * n if t > 1 else 0.0
        tp_s_mb = tp_mb / _bandwidth(hw, t)
        k = min(shape.cfg.moe_top_k, shape.cfg.num_experts)
        ep_mb = moe_blocks * passes * 2 * k * n * (ep - 1) / ep if ep > 1 else 0.0
        ep_s_mb = ep_mb / _bandwidth(hw, t * ep)
        pp_mb = 2 * v * n / t if p > 1 else 0.0
        pp_s_mb = pp_mb / _bandwidth(hw, layout.gpus)

        bubble = pipeline_bubble(p, m, v)
        pipeline = m * (compute_mb + tp_s_mb + ep_s_mb + pp_s_mb) * (1 + bubble)

        dense, expert = mem.params(layout, 0)
        dp_bytes, dp_s, exposed = self._dp(layout, dense, expert, compute_mb)
        comm = Comm(tp_bytes=m * tp_mb, tp_s=m * tp_s_mb, ep_bytes=m * ep_mb, ep_s=m * ep_s_mb,
                    pp_bytes=m * pp_mb, pp_s=m * pp_s_mb, dp_bytes=dp_bytes, dp_s=dp_s, dp_exposed_s=exposed)
        return Estimate(layout, memory, comm, m, bubble, flops, compute, pipeline + exposed,
                        self._flops["full"], self._flops["none"], hw.peak_tflops)

    def _dp(self, layout: Layout, dense: float, expert: float, compute_mb: float) -> tuple[float, float, float]:
        """(bytes, seconds, exposed seconds) of the data-parallel gradient reduction on one rank."""
        d, ep = layout.dp, layout.ep
        bw = _bandwidth(self.hw, layout.tp * d)
        groups = [(dense, d), (expert, max(d // ep, 1))]
        fwd_share = self._flops["none"] / 3 / self._flops[layout.recompute]
        bwd_window, fwd_window = compute_mb * (1 - fwd_share), compute_mb * fwd_share
        if layout.fsdp:  # per micro-batch: all-gather forward and again backward, reduce-scatter of gradients
            m = layout.microbatches(self.mem.global_batch)
            ag = m * sum((n - 1) / n * params * self.w_bytes for params, n in groups if n > 1)
            rs = m * sum((n - 1) / n * params * self.g_bytes for params, n in groups if n > 1)
            exposed = max(0.0, ag / bw - m * fwd_window) + max(0.0, (ag + rs) / bw - m * bwd_window)
            return 2 * ag + rs, (2 * ag + rs) / bw, exposed
        if layout.distributed_optimizer:
            rs = sum((n - 1) / n * params * self.g_bytes for params, n in groups if n > 1)
            ag = sum((n - 1) / n * params * self.w_bytes for params, n in groups if n > 1)
            exposed = max(0.0, rs / bw - bwd_window) + max(0.0, ag / bw - fwd_window)
            return rs + ag, (rs + ag) / bw, exposed
        ar = sum(2 * (n - 1) / n * params * self.g_bytes for params, n in groups if n > 1)
        return ar, ar / bw, max(0.0, ar / bw - bwd_window)
