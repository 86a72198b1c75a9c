"""Tensor-parallel layers, the vocab-parallel loss, and the function that applies them to a plain model.

``parallelize_tensor(model, state)`` walks a model built from :mod:`mwb.core.models.transformer` and:
  * swaps q/k/v, up/gate projections for column-parallel linears and o/down projections for row-parallel
    ones (attention heads and MLP columns split over TP; the row-parallel output is all-reduced, or
    reduce-scattered along the sequence with SP);
  * hooks the input of each attention/MLP/head to "enter the TP region" once (identity forward with an
    all-reduce backward; with SP an all-gather of the sequence with a reduce-scatter backward);
  * swaps the word embedding for a vocab-parallel one, the output head for a vocab-sharded one and the
    loss for the vocab-parallel cross-entropy (full logits are never gathered);
  * marks parameters whose gradients are partial under SP (norms, row-parallel biases) so the optimizer
    all-reduces them over TP, and replaces dropout on sharded activations with the model-parallel stream
    (attention-probability dropout through the ``AttentionCore.dropout_rng`` hook, at every TP size);
  * applies the pieces specific to one family (:data:`FAMILY_PLANS`: T5's relative-bias tables sharded over
    heads, BERT's pooler and MLM transform under SP), so that :mod:`mwb.core.models` imports nothing from here.
Each parameter records how it is sharded (``param.tp_dim``: None, 0 or 1; ``param.full_shape``), which the
initialiser, the gradient-norm and the checkpoint code read.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..errors import LayoutError
from ..models.bert import LMTransform, Pooler
from ..models.loss import blocked_cross_entropy
from ..models.t5 import RelativePositionBias, T5Stack
from ..models.mlp import MLP
from ..models.transformer import Attention, AttentionCore, CrossEntropy, Embedding, TransformerBlock
from .collectives import (SEQ_DIM, copy_to_tp, gather_from_sequence, gather_sequence_for_linears, group_rank,
                          group_size, reduce_from_tp, reduce_scatter_to_sequence, scatter_to_sequence,
                          start_gather, start_reduce_scatter)
from .random import ShardedDropout, model_parallel_rng


def _mark(param: nn.Parameter, tp_dim: Optional[int], full_shape, sequence_parallel: bool = False,
          group=None) -> None:
    param.tp_dim = tp_dim
    param.tp_rank = group_rank(group)
    param.full_shape = tuple(full_shape)
    param.sequence_parallel = sequence_parallel


class ColumnParallelLinear(nn.Module):
    """``y = x·Wᵀ`` with W split by rows (output features); input already inside the TP region."""

    def __init__(self, in_features: int, out_features: int, bias: bool, group, device=None, dtype=None):
        super().__init__()
        tp = group_size(group)
        if out_features % tp:
            raise ValueError(f"output size {out_features} is not divisible by tp {tp}")
        self.group, self.in_features, self.out_features = group, in_features, out_features // tp
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features, device=device, dtype=dtype))
        _mark(self.weight, 0, (out_features, in_features), group=group)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_features, device=device, dtype=dtype))
            _mark(self.bias, 0, (out_features,), group=group)
        self.gemm = F.linear  # the local matmul; --precision fp8 swaps in mwb.core.models.fp8.fp8_linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tag = getattr(x, "_sp_shard", None)
        if tag is not None and self.gemm is F.linear and torch.is_grad_enabled():
            local, shard = tag
            shard.users += 1
            return _SequenceGatheredLinear.apply(local, x.detach(), self.weight, self.bias, shard)
        return self.gemm(x, self.weight, self.bias)


class _SequenceGatheredLinear(torch.autograd.Function):
    """``F.linear(all_gather_s(x_local), W, b)`` that keeps only ``x_local`` (and W) for backward, as
    Megatron's column-parallel linear does under sequence parallelism.

    The forward is handed the already gathered input (the TP region's entry gathered it once for q, k and v,
    or FC1 and the gate); it is not saved. Backward starts the re-gather of the local shard (shared by the
    linears of one :class:`~.collectives.SequenceShard`), computes ``grad_input = g·W`` meanwhile, starts
    the reduce-scatter of ``grad_input`` over the sequence and computes ``grad_W = gᵀ·x`` from the
    re-gathered input while it runs. Each linear reduce-scatters its own ``grad_input`` into the shard's
    gradient (autograd sums them), so the gradient never depends on which linears ran backward.
    The fp8 gemm and plain ``no_grad`` calls keep the ordinary path (they save the gathered input).
    """

    @staticmethod
    def forward(ctx, x_local, x_full, weight, bias, shard):
        ctx.save_for_backward(x_local, weight)
        ctx.shard, ctx.has_bias = shard, bias is not None
        return F.linear(x_full, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x_local, weight = ctx.saved_tensors
        shard = ctx.shard
        finish_gather = None
        if shard.full is None and ctx.needs_input_grad[2]:
            finish_gather = start_gather(x_local, SEQ_DIM, shard.group)
        gx = None
        finish_rs = None
        if ctx.needs_input_grad[0]:
            gx = torch.matmul(g, weight)  # overlaps the all-gather
            finish_rs = start_reduce_scatter(gx, SEQ_DIM, shard.group)
        gw = gb = None
        g2 = g.reshape(-1, g.size(-1))
        if ctx.needs_input_grad[2]:
            if finish_gather is not None:
                shard.full = finish_gather()
            full = shard.full
            gw = g2.t().mm(full.reshape(-1, full.size(-1)))  # overlaps the reduce-scatter
        if ctx.has_bias and ctx.needs_input_grad[3]:
            gb = g2.sum(0)
        shard.users -= 1
        if shard.users <= 0:
            shard.full = None  # the last linear of this input: drop the re-gathered copy
        gx = finish_rs() if finish_rs is not None else None
        return gx, None, gw, gb, None


class RowParallelLinear(nn.Module):
    """``y = Σ_ranks x_r·W_rᵀ + b`` with W split by columns; the sum leaves the TP region."""

    def __init__(self, in_features: int, out_features: int, bias: bool, group, sequence_parallel: bool,
                 device=None, dtype=None):
        super().__init__()
        tp = group_size(group)
        if in_features % tp:
            raise ValueError(f"input size {in_features} is not divisible by tp {tp}")
        self.group, self.sp = group, sequence_parallel
        self.in_features, self.out_features = in_features // tp, out_features
        self.weight = nn.Parameter(torch.empty(out_features, self.in_features, device=device, dtype=dtype))
        _mark(self.weight, 1, (out_features, in_features), group=group)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
            _mark(self.bias, None, (out_features,), sequence_parallel=sequence_parallel)
        self.gemm = F.linear  # the local matmul; --precision fp8 swaps in mwb.core.models.fp8.fp8_linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gemm(x, self.weight, None)
        y = reduce_scatter_to_sequence(y, self.group) if self.sp else reduce_from_tp(y, self.group)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary rows; each rank looks up the ids it owns, then all-reduce."""

    def __init__(self, num_embeddings: int, dim: int, group, device=None, dtype=None):
        super().__init__()
        tp = group_size(group)
        if num_embeddings % tp:
            raise ValueError(f"vocab size {num_embeddings} is not divisible by tp {tp}")
        self.group = group
        self.per_rank = num_embeddings // tp
        self.start = group_rank(group) * self.per_rank
        self.weight = nn.Parameter(torch.empty(self.per_rank, dim, device=device, dtype=dtype))
        _mark(self.weight, 0, (num_embeddings, dim), group=group)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside[..., None], 0.0)
        return reduce_from_tp(out, self.group)


class VocabParallelCrossEntropy(CrossEntropy):
    """Drop-in for :class:`~mwb.core.models.transformer.CrossEntropy` on vocab-sharded logits: only the
    per-token losses differ; masking and summing are inherited."""

    def __init__(self, vocab_size: int, group) -> None:
        super().__init__(vocab_size)
        self.group = group

    def token_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Blocked cross-entropy on this rank's vocabulary columns, log-sum-exps and target logits combined
        over the TP group (:func:`~mwb.core.models.loss.blocked_cross_entropy`)."""
        start = group_rank(self.group) * logits.size(-1)
        group = self.group
        return blocked_cross_entropy(logits, labels.clamp(min=0), self.vocab_size, start,
                                     reduce_max=lambda t: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group),
                                     reduce_sum=lambda t: dist.all_reduce(t, group=group))


# ------------------------------------------------------------------------------------------ the plan


def _enter_region_hook(group, sp: bool):
    """Forward pre-hook: the module's input (and cross-attention ``kv_input``) enters the TP region."""
    def enter(x):  # under SP the column-parallel linears keep only the local shard (_SequenceGatheredLinear)
        return gather_sequence_for_linears(x, group) if sp else copy_to_tp(x, group)

    def hook(module, args, kwargs):
        args = (enter(args[0]),) + tuple(args[1:]) if args else args
        if kwargs.get("kv_input") is not None:
            kwargs = dict(kwargs, kv_input=enter(kwargs["kv_input"]))
        return args, kwargs
    return hook


def _scatter_output_hook(group):
    def hook(module, args, output):
        return scatter_to_sequence(output, group)
    return hook


def _column(linear: nn.Linear, group) -> ColumnParallelLinear:
    return ColumnParallelLinear(linear.in_features, linear.out_features, linear.bias is not None, group,
                                device=linear.weight.device, dtype=linear.weight.dtype)


def _row(linear: nn.Linear, group, sp: bool) -> RowParallelLinear:
    return RowParallelLinear(linear.in_features, linear.out_features, linear.bias is not None, group, sp,
                             device=linear.weight.device, dtype=linear.weight.dtype)


def mark_replicated(model: nn.Module) -> None:
    """Give every parameter not yet marked the metadata of a replicated (unsharded) tensor."""
    for p in model.parameters():
        if not hasattr(p, "tp_dim"):
            _mark(p, None, p.shape)


# ------------------------------------------------------------- pieces specific to one model family


def _shard_lm_transform(module: LMTransform, state) -> None:
    """BERT's MLM transform: under SP this replicated dense layer sees one sequence slice, so its gradients
    are partial sums over TP (the LayerNorm is marked by the generic pass); Megatron marks them the same way."""
    for p in module.dense.parameters():
        _mark(p, None, p.shape, sequence_parallel=state.sp)


def _shard_pooler(module: Pooler, state) -> None:
    """BERT's pooler: under SP the first token lives on TP rank 0 only, so gather the sequence first. Every
    rank then computes the same (replicated) pooled output, so the backward just keeps this rank's slice."""
    if not state.sp:
        return
    group = state.tp_group

    def gather(mod, args):
        return (gather_from_sequence(args[0], group, grad_reduce=False),) + tuple(args[1:])
    module.register_forward_pre_hook(gather)


def _shard_relative_bias(module: RelativePositionBias, state) -> None:
    """T5's relative bias table: keep the columns of this rank's heads (column-parallel q/k/v give rank r a
    contiguous block of heads)."""
    tp = group_size(state.tp_group)
    full = tuple(module.weight.shape)
    if full[1] % tp:
        raise LayoutError(f"T5 relative bias: {full[1]} heads are not divisible by tp {tp}")
    w = nn.Parameter(torch.empty(full[0], full[1] // tp, device=module.weight.device, dtype=module.weight.dtype))
    _mark(w, 1, full, group=state.tp_group)
    module.weight = w


def _shard_t5_stack(module: T5Stack, state) -> None:
    """Under SP a T5 stack's final norm outputs a sequence slice: its dropout draws per-rank masks."""
    if state.sp and module.final:
        module.dropout = ShardedDropout(module.dropout.p)


# module class → what the plan does to it beyond the generic pass (applied in module order)
FAMILY_PLANS = ((LMTransform, _shard_lm_transform), (Pooler, _shard_pooler),
                (RelativePositionBias, _shard_relative_bias), (T5Stack, _shard_t5_stack))


def parallelize_tensor(model: nn.Module, state) -> nn.Module:
    """Apply tensor (and sequence) parallelism in place; a no-op apart from metadata when tp == 1."""
    for module in model.modules():  # attention dropout on local heads: the model-parallel stream
        if isinstance(module, AttentionCore):
            module.dropout_rng = model_parallel_rng
    group, sp = state.tp_group, state.sp
    if group_size(group) == 1:
        mark_replicated(model)
        return model
    hook = _enter_region_hook(group, sp)
    for name, module in list(model.named_modules()):
        if isinstance(module, Attention):
            for proj in ("q_proj", "k_proj", "v_proj"):
                setattr(module, proj, _column(getattr(module, proj), group))
            module.o_proj = _row(module.o_proj, group, sp)
            module.register_forward_pre_hook(hook, with_kwargs=True)
        elif isinstance(module, MLP):
            module.up_proj = _column(module.up_proj, group)
            if module.gated:
                module.gate_proj = _column(module.gate_proj, group)
            module.down_proj = _row(module.down_proj, group, sp)
            module.register_forward_pre_hook(hook, with_kwargs=True)
        elif isinstance(module, Embedding):
            old = module.word
            module.word = VocabParallelEmbedding(old.num_embeddings, old.embedding_dim, group,
                                                 device=old.weight.device, dtype=old.weight.dtype)
            if sp:
                module.register_forward_hook(_scatter_output_hook(group))
        elif isinstance(module, TransformerBlock) and sp:
            for drop in ("drop1", "drop2", "drop_cross"):
                if hasattr(module, drop):
                    setattr(module, drop, ShardedDropout(getattr(module, drop).p))
    # Output head, loss and the remaining sequence-parallel pieces.
    for name, module in list(model.named_modules()):
        head = getattr(module, "head", None)
        loss_fn = getattr(module, "loss_fn", None)
        if isinstance(head, nn.Linear) and isinstance(loss_fn, CrossEntropy) and \
                not isinstance(loss_fn, VocabParallelCrossEntropy):
            module.head = _column(head, group)
            module.head.register_forward_pre_hook(hook, with_kwargs=True)
            module.loss_fn = VocabParallelCrossEntropy(module.loss_fn.vocab_size, group)
        if sp and isinstance(getattr(module, "embed_dropout", None), nn.Dropout):
            module.embed_dropout = ShardedDropout(module.embed_dropout.p)
    # Model-specific pieces the generic pass cannot know (a relative-position bias table sharded over heads,
    # replicated layers that see only a sequence slice): the family plans above, and modules defined above
    # core (or holding no parallel code) may expose parallelize_tp(state) themselves.
    for module in list(model.modules()):
        for cls, plan in FAMILY_PLANS:
            if isinstance(module, cls):
                plan(module, state)
        if callable(getattr(module, "parallelize_tp", None)):
            module.parallelize_tp(state)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    mark_replicated(model)
    if sp:  # norms see only this rank's slice of the sequence: their gradients are partial sums
        for module in model.modules():
            if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                for p in module.parameters(recurse=False):
                    p.sequence_parallel = True
    return model
