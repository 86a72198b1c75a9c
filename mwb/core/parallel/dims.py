"""Parallel degrees, validated once against the world size and the model.

Every layout error a user can make (a world size that does not divide, heads that do not split over TP,
sequence parallelism without TP, ...) is caught here, before any process group or tensor exists, with one
message naming the numbers. Data-parallel size is derived: dp = world / (tp · pp · cp).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import LayoutError


@dataclass(frozen=True)
class ParallelDims:
    world_size: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    order: str = "tp-cp-ep-dp-pp"

    def __post_init__(self) -> None:
        for name in ("world_size", "tp", "pp", "vpp", "cp", "ep"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise LayoutError(f"{name} must be a positive integer, got {v!r}")
        mp = self.tp * self.pp * self.cp
        if self.world_size % mp:
            raise LayoutError(
                f"world size {self.world_size} is not divisible by tp·pp·cp = {self.tp}·{self.pp}·{self.cp} = {mp}; "
                f"choose --nproc as a multiple of {mp}")
        if self.dp % self.ep:
            raise LayoutError(
                f"expert parallel size {self.ep} must divide the data-parallel size {self.dp} "
                f"(world {self.world_size} / tp·pp·cp {mp})")
        if self.sp and self.tp == 1:
            raise LayoutError("sequence parallelism (--sp) needs tensor parallelism: set --tp 2 or more")
        if self.vpp > 1 and self.pp == 1:
            raise LayoutError("virtual pipeline stages (--vpp) need pipeline parallelism: set --pp 2 or more")
        dims = self.order.split("-")
        base = [d for d in dims if d != "ep"]
        if sorted(base) != ["cp", "dp", "pp", "tp"] or len(dims) != len(set(dims)):
            raise LayoutError(f"rank order '{self.order}' must be a permutation of tp, cp, dp, pp "
                              f"(optionally with ep just before dp)")
        if "ep" in dims and dims.index("ep") + 1 != dims.index("dp"):
            raise LayoutError(f"rank order '{self.order}': ep must come right before dp")

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: replicas of each expert (over dp·cp, divided by ep)."""
        return self.dp * self.cp // self.ep

    def check_model(self, num_heads: int, num_query_groups: Optional[int], num_layers: int,
                    num_experts: int = 0, seq_length: Optional[int] = None,
                    ffn_hidden_size: Optional[int] = None, pipeline_layers: Optional[list] = None,
                    layers_what: str = "num_layers") -> None:
        """Fail early when the model cannot be split over this layout. ``num_layers`` counts the layers the
        pipeline splits (``layers_what`` names them in messages, e.g. T5's encoder + decoder layers)."""
        groups = num_query_groups or num_heads
        if num_heads % self.tp:
            raise LayoutError(f"number of attention heads {num_heads} is not divisible by tp {self.tp}; "
                              f"choose tp among {_divisors(num_heads)}")
        if groups % self.tp:
            raise LayoutError(f"number of query groups {groups} is not divisible by tp {self.tp}; "
                              f"choose tp among {_divisors(groups)}")
        if num_heads % groups:
            raise LayoutError(f"number of attention heads {num_heads} is not divisible by "
                              f"query groups {groups}")
        if ffn_hidden_size is not None and ffn_hidden_size % self.tp:
            raise LayoutError(f"ffn hidden size {ffn_hidden_size} is not divisible by tp {self.tp}")
        stages = self.pp * self.vpp
        if pipeline_layers is not None:
            if len(pipeline_layers) != stages or sum(pipeline_layers) != num_layers or min(pipeline_layers) < 1:
                raise LayoutError(f"pipeline_layers {pipeline_layers} must list {stages} positive counts "
                                  f"(pp·vpp) summing to {layers_what} {num_layers}")
        elif num_layers % stages:
            raise LayoutError(f"{layers_what} {num_layers} is not divisible by pp·vpp = {self.pp}·{self.vpp} = "
                              f"{stages}; change the layer count or give parallel.pipeline_layers")
        if num_experts:
            if num_experts % self.ep:
                raise LayoutError(f"number of experts {num_experts} is not divisible by ep {self.ep}; "
                                  f"choose ep among {_divisors(num_experts)}")
        elif self.ep > 1:
            raise LayoutError(f"expert parallelism (ep {self.ep}) needs a mixture-of-experts model: "
                              f"set model.num_experts")
        if seq_length is not None:
            split = (self.tp if self.sp else 1) * self.cp * (2 if self.cp > 1 else 1)
            if seq_length % split:
                raise LayoutError(f"sequence length {seq_length} is not divisible by {split} "
                                  f"(tp {self.tp} with sp, times 2·cp for context parallelism)")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
