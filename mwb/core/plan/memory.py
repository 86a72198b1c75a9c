"""Memory one GPU needs for a layout: model states (Megatron's bytes-per-parameter) and activations
(Korthikanti et al. 2022), on the pipeline ranks where the peak is.

What is counted, per rank:

* weights, gradients and optimizer states: parameters the rank holds (:func:`.model.rank_parameters`) times
  :data:`.formulas.STATE_BYTES` (bf16: 2 + 4 + 12 = 18 bytes, or 6 + 12/dp with the distributed optimizer,
  whose shard of expert parameters is 12/(dp/ep); with FSDP all 18/dp, plus ``fsdp_gathered``: the root
  group and two blocks unsharded, weights and gradients, :meth:`MemoryModel.fsdp_gathered`);
* activations of the layers the rank holds, for as many micro-batches as 1F1B keeps in flight there
  (:func:`.formulas.inflight_microbatch_chunks`: L layers' worth on the first stage, ×(1 + (p−1)/(p·v))
  interleaved);
* first stage: the embedding-dropout mask of each in-flight micro-batch; last stage: the final-norm and
  output-layer inputs and the float32 logits the cross entropy keeps (4·s·b·V/t), for one micro-batch;
* the recompute working set: with full recompute one layer's complete activations while it is re-run, with
  selective recompute one layer's attention scores.

Not counted: the CUDA context, NCCL buffers, allocator fragmentation (``Hardware.memory_reserve_gib``
covers them) and temporary buffers inside kernels. Only the first and last pipeline ranks are evaluated; a
middle rank holds no embedding or head and fewer in-flight micro-batches than the first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .formulas import STATE_BYTES, activation_bytes_per_layer, inflight_microbatch_chunks
from .layout import Layout
from .model import LayerCount, ModelShape, rank_parameters, stage_layers


@dataclass(frozen=True)
class Memory:
    """Bytes on the busiest rank of a layout, by kind."""

    stage: str  # which pipeline rank is the peak: "first", "last" or "only"
    params: float  # parameters on that rank (dense + expert)
    weights: float
    grads: float
    optimizer: float
    activations: float
    detail: dict = field(default_factory=dict)  # activation parts

    @property
    def states(self) -> float:
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> float:
        return self.states + self.activations

    def as_dict(self) -> dict:
        return {"stage": self.stage, "params": self.params, "weights": self.weights, "grads": self.grads,
                "optimizer": self.optimizer, "activations": self.activations, "total": self.total,
                "activation_detail": dict(self.detail)}


class MemoryModel:
    """Memory of any layout of one model and workload, caching what layouts share."""

    def __init__(self, shape: ModelShape, global_batch: int, precision: str = "bf16",
                 flash_attention: bool = False) -> None:
        if precision not in STATE_BYTES:
            raise ValueError(f"precision must be one of {', '.join(STATE_BYTES)}, got {precision!r}")
        self.shape, self.global_batch, self.precision = shape, global_batch, precision
        self.flash = flash_attention
        self.act_bytes = 4 if precision == "fp32" else 2
        self.layers: list[LayerCount] = shape.layers()
        self._params: dict = {}
        self._act: dict = {}

    # ---------------------------------------------------------------------------------------- pieces
    def params(self, layout: Layout, rank: int) -> tuple[float, float]:
        key = (layout.tp, layout.pp, layout.vpp, layout.ep, rank)
        if key not in self._params:
            self._params[key] = rank_parameters(self.shape, layout.tp, layout.pp, layout.vpp, layout.ep, rank,
                                                self.layers)
        return self._params[key]

    def layer_activation(self, layout: Layout, recompute: str, moe: bool) -> float:
        """Bytes one block stores for one micro-batch (see :func:`.formulas.activation_breakdown`)."""
        key = (layout.micro_batch_size, layout.tp, layout.sp, recompute, moe)
        if key not in self._act:
            c = self.shape.cfg
            experts = min(c.moe_top_k, c.num_experts) if moe else 1
            ffn = (c.moe_ffn_hidden_size or c.ffn_size) if moe else c.ffn_size
            self._act[key] = activation_bytes_per_layer(
                self.shape.seq_length, layout.micro_batch_size, self.shape.h, self.shape.heads, layout.tp,
                layout.sp, recompute, self.act_bytes, ffn_hidden_size=ffn, query_groups=c.query_groups,
                head_dim=c.head_dim, gated=c.activation == "swiglu", dropout=c.dropout > 0,
                flash=self.flash, experts_per_token=experts)
        return self._act[key]

    def activations(self, layout: Layout, rank: int) -> dict:
        """Activation bytes on pipeline rank ``rank`` at its peak, by part."""
        s, b, h, t = self.shape.seq_length, layout.micro_batch_size, self.shape.h, layout.tp
        p, v = layout.pp, layout.vpp
        m = layout.microbatches(self.global_batch)
        held = stage_layers(len(self.layers), p, v, rank)
        per_chunk = sum(self.layer_activation(layout, layout.recompute, self.layers[i].moe) for i in held) / v
        chunks = inflight_microbatch_chunks(p, m, v, rank)
        out = {"layers": per_chunk * chunks}
        rep = 1 / t if layout.sp else 1.0
        if rank == 0 and self.shape.cfg.dropout > 0:
            out["embedding_dropout_mask"] = s * b * h * rep * math.ceil(chunks / v)
        if rank == p - 1:
            vocab = self.shape.padded_vocab(t)
            out["output_layer"] = 2 * self.act_bytes * s * b * h * rep + 4 * s * b * vocab / t
        if layout.recompute != "none":
            moe = any(self.layers[i].moe for i in held)
            full = self.layer_activation(layout, "none", moe)
            if layout.recompute == "full":
                out["recompute_working_set"] = full
            else:
                out["recompute_working_set"] = full - self.layer_activation(layout, "selective", moe)
        return out

    # ---------------------------------------------------------------------------------------- total
    def rank_memory(self, layout: Layout, rank: int) -> Memory:
        dense, expert = self.params(layout, rank)
        w, g, o = STATE_BYTES[self.precision]
        acts = self.activations(layout, rank)
        if layout.fsdp:  # every model state sharded over dp, plus the gathered copies of the blocks in flight
            share = dense / layout.dp + expert / max(layout.dp // layout.ep, 1)
            acts["fsdp_gathered"] = self.fsdp_gathered(layout, rank)
            stage = "only" if layout.pp == 1 else ("first" if rank == 0 else "last")
            return Memory(stage, dense + expert, w * share, g * share, o * share, sum(acts.values()), acts)
        if layout.distributed_optimizer:
            optimizer = o * (dense / layout.dp + expert / max(layout.dp // layout.ep, 1))
        else:
            optimizer = o * (dense + expert)
        stage = "only" if layout.pp == 1 else ("first" if rank == 0 else "last")
        return Memory(stage, dense + expert, w * (dense + expert), g * (dense + expert), optimizer,
                      sum(acts.values()), acts)

    def fsdp_gathered(self, layout: Layout, rank: int) -> float:
        """FSDP's transient unsharded state: the root group (embedding, final norm, output head: gathered
        through the step) plus the two largest blocks (the one running and the one prefetched), each as its
        weights in the compute dtype and its unsharded gradient before the reduce-scatter."""
        t, ep = layout.tp, layout.ep
        dense, expert = self.params(layout, rank)
        held = stage_layers(len(self.layers), layout.pp, layout.vpp, rank)
        blocks = sorted((self.layers[i].sharded / t + self.layers[i].replicated + self.layers[i].expert / (t * ep)
                         for i in held), reverse=True)
        root = dense + expert - sum(blocks)
        w, g, _ = STATE_BYTES[self.precision]
        return (root + sum(blocks[:2])) * (w + g)

    def peak(self, layout: Layout) -> Memory:
        """The busier of the first and last pipeline ranks."""
        first = self.rank_memory(layout, 0)
        if layout.pp == 1:
            return first
        last = self.rank_memory(layout, layout.pp - 1)
        return first if first.total >= last.total else last
