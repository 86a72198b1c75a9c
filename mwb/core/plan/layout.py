"""The planner's inputs: a parallel layout, the cluster it runs on, and what the user pinned.

Kept separate from the formulas so the memory and cost models, the search and the CLI all speak about the
same few frozen records.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class Layout:
    """One way to run the model: parallel degrees and the memory-saving switches."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    ep: int = 1
    micro_batch_size: int = 1
    sp: bool = False
    recompute: str = "none"  # none | selective | full
    distributed_optimizer: bool = False
    fsdp: bool = False  # FSDP2 (--fsdp): weights, gradients and optimizer state sharded over dp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def microbatches(self, global_batch: int) -> int:
        """Micro-batches each pipeline runs per iteration (gradient-accumulation steps)."""
        return global_batch // (self.dp * self.micro_batch_size)

    def short(self) -> str:
        """``tp 8 · pp 64 · dp 6`` plus whatever is not the default."""
        parts = [f"tp {self.tp} · pp {self.pp} · dp {self.dp}"]
        if self.vpp > 1:
            parts.append(f"vpp {self.vpp}")
        if self.ep > 1:
            parts.append(f"ep {self.ep}")
        parts.append(f"micro-batch {self.micro_batch_size}")
        parts.append("sp" if self.sp else "no sp")
        parts.append(f"recompute {self.recompute}")
        parts.append("fsdp" if self.fsdp else
                     "distributed optimizer" if self.distributed_optimizer else "replicated optimizer")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "vpp": self.vpp, "ep": self.ep,
                "micro_batch_size": self.micro_batch_size, "sp": self.sp, "recompute": self.recompute,
                "distributed_optimizer": self.distributed_optimizer, "fsdp": self.fsdp}


@dataclass(frozen=True)
class Hardware:
    """One GPU type in nodes of ``gpus_per_node``, and the cost model's knobs.

    Bandwidths are per GPU and per direction in GB/s (10⁹ bytes/s), as NCCL's "bus bandwidth" reports them:
    ``intra_node_bw`` for groups inside a node (NVLink/NVSwitch), ``inter_node_bw`` for groups that cross
    nodes (one InfiniBand NIC per GPU). ``efficiency`` is the fraction of peak the matmuls reach.
    ``memory_reserve_gib`` is kept free for the CUDA context, NCCL buffers and allocator fragmentation.
    """

    name: str = "a100-80gb"
    peak_tflops: float = 312.0
    memory_gib: float = 80.0
    gpus_per_node: int = 8
    intra_node_bw: float = 230.0
    inter_node_bw: float = 25.0
    efficiency: float = 0.5
    memory_reserve_gib: float = 2.0
    power_w: float = 400.0  # per GPU at full load (the board's TDP): the energy estimate's device power

    @property
    def usable_bytes(self) -> float:
        return (self.memory_gib - self.memory_reserve_gib) * 2**30

    def with_(self, **changes) -> "Hardware":
        """A copy with the given fields changed; ``None`` values keep the default."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


# Dense bf16 peak, memory, NVLink bus bandwidth (measured all-reduce busbw is ~75% of the link's 300/450 GB/s)
# and one 200 Gb/s HDR (A100 DGX) or 400 Gb/s NDR (H100/H200 DGX) NIC per GPU.
# TDP: 400 W for the A100 SXM, 700 W for the H100 and H200 SXM (NVIDIA's data sheets).
HARDWARE = {
    "a100-40gb": Hardware("a100-40gb", 312.0, 40.0, 8, 230.0, 25.0, power_w=400.0),
    "a100-80gb": Hardware("a100-80gb", 312.0, 80.0, 8, 230.0, 25.0, power_w=400.0),
    "h100-80gb": Hardware("h100-80gb", 989.0, 80.0, 8, 360.0, 50.0, power_w=700.0),
    "h200-141gb": Hardware("h200-141gb", 989.0, 141.0, 8, 360.0, 50.0, power_w=700.0),
}


@dataclass(frozen=True)
class Constraints:
    """What the user fixed; ``None`` means the search chooses."""

    tp: Optional[int] = None
    pp: Optional[int] = None
    vpp: Optional[int] = None
    ep: int = 1
    sp: Optional[bool] = None
    recompute: Optional[str] = None
    distributed_optimizer: Optional[bool] = None
    fsdp: bool = False  # plan FSDP layouts only (pp 1, no distributed optimizer), as --fsdp trains
    micro_batch_size: Optional[int] = None
    micro_batch_sizes: tuple = (1, 2, 4, 8)
    max_vpp: int = 8
    flash_attention: bool = False  # a fused attention kernel that stores no s×s scores


@dataclass(frozen=True)
class Workload:
    """How much is trained per iteration, on how many GPUs, in which precision."""

    gpus: int = 8
    global_batch_size: int = 512
    precision: str = "bf16"  # bf16 | fp16 | fp32 (weights; see formulas.STATE_BYTES)
    rampup: Optional[tuple] = None  # Megatron's --rampup-batch-size (start, increment, samples), or None

    def batch_sizes(self) -> list[int]:
        """Every global batch an iteration can have: the ramp-up's sizes, or the one global batch."""
        if self.rampup is None:
            return [self.global_batch_size]
        return list(range(int(self.rampup[0]), self.global_batch_size + 1, int(self.rampup[1])))
