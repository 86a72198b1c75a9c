"""Which layers each pipeline stage (and virtual stage) holds.

With ``pp`` ranks and ``vpp`` virtual stages per rank there are pp·vpp model chunks; chunk ``v`` of pipeline
rank ``r`` is global stage ``v·pp + r`` (Megatron's interleaved assignment), so with vpp = 1 rank r simply
holds stage r. Layers split evenly, or as given by ``pipeline_layers`` (one count per global stage).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class StageSpec:
    stage: int  # global (virtual) stage index
    layer_ids: tuple[int, ...]
    pre_process: bool  # holds the embedding
    post_process: bool  # holds the output head and loss


def stage_layer_counts(num_layers: int, stages: int, pipeline_layers: Optional[list] = None) -> list[int]:
    if pipeline_layers is not None:
        return [int(x) for x in pipeline_layers]
    return [num_layers // stages] * stages


def rank_stages(num_layers: int, pp: int, vpp: int, pp_rank: int,
                pipeline_layers: Optional[list] = None) -> list[StageSpec]:
    """The chunks of pipeline rank ``pp_rank``, in virtual-stage order."""
    stages = pp * vpp
    counts = stage_layer_counts(num_layers, stages, pipeline_layers)
    starts = [sum(counts[:i]) for i in range(stages)]
    out = []
    for v in range(vpp):
        s = v * pp + pp_rank
        out.append(StageSpec(s, tuple(range(starts[s], starts[s] + counts[s])), s == 0, s == stages - 1))
    return out
