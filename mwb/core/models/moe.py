"""Mixture of experts: a router, top-k routing, grouped expert MLPs and the auxiliary losses.

The layer replaces a transformer block's MLP. It is plain single-device code: routing, capacity dropping
and the grouped expert matmuls all happen here, and *where tokens go* is delegated to a dispatcher object.
The default :class:`LocalDispatcher` keeps every token on this process; expert parallelism
(:mod:`mwb.core.parallel.expert`) swaps in one that shards the experts over ranks and moves tokens with
all-to-all (or all-gather), and that also handles the tensor-parallel region around the experts.

Auxiliary losses (Switch/GShard load balancing and the router z-loss) are computed per micro-batch over the
tokens that micro-batch routes, and are attached to the layer's output with :class:`_AttachAuxLoss`, an
identity whose backward injects ``d(aux)·scale``. The trainer sets ``scale = loss_scale / M`` (M = number of
micro-batches in the global batch, over all data-parallel ranks), so the training objective is
``LM loss + mean over micro-batches of the aux terms`` for every parallel layout: the same micro-batches
exist in every layout, only the ranks that run them differ. (Gradients are finally multiplied by
nominal/actual loss-token count; with a loss mask the aux term is weighted by that same global factor in
every layout.)
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ConfigError, ModelConfig
from .mlp import MLP

# --------------------------------------------------------------------------------------- aux-loss state


class _AuxState:
    """Per-step aux-loss bookkeeping: the backward scale and the (detached) values seen this step."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.sums: dict[str, torch.Tensor] = {}

    def record(self, name: str, value: torch.Tensor) -> None:
        v = value.detach().double()  # stays on its device: no sync until the step reads it
        self.sums[name] = self.sums[name] + v if name in self.sums else v


AUX = _AuxState()


def set_aux_loss_scale(scale: float) -> None:
    """Multiplier of every aux-loss gradient (the trainer: ``loss_scale / micro-batches per step``)."""
    AUX.scale = float(scale)


def reset_aux_losses() -> None:
    AUX.sums = {}


def aux_loss_sums() -> dict[str, float]:
    """Σ over this rank's micro-batches and MoE layers of each weighted aux term since the last reset."""
    return {k: float(v) for k, v in AUX.sums.items()}


class _AttachAuxLoss(torch.autograd.Function):
    """Identity on ``out``; backward gives ``aux`` the gradient ``AUX.scale`` (Megatron's
    MoEAuxLossAutoScaler), so the aux loss joins the objective without changing what the model returns."""

    @staticmethod
    def forward(ctx, out, aux):
        ctx.aux_shape, ctx.aux_dtype = aux.shape, aux.dtype
        return out

    @staticmethod
    def backward(ctx, g):
        return g, torch.full(ctx.aux_shape, AUX.scale, dtype=ctx.aux_dtype, device=g.device)


def _in_backward() -> bool:
    """True while autograd is running (activation recomputation re-runs forwards then: record nothing)."""
    try:
        return torch._C._current_graph_task_id() != -1
    except AttributeError:  # pragma: no cover - older torch
        return False


# ------------------------------------------------------------------------------------------- routing


def route(logits: torch.Tensor, k: int, score: str = "softmax", pre_softmax: bool = False):
    """Top-k routing. Returns ``(weights [T,k] fp32, experts [T,k] long, probs [T,E] fp32)``; ``probs``
    are the full-distribution scores the load-balancing loss uses.

    softmax, pre_softmax: weights are the top-k of softmax over all experts (not renormalised);
    softmax, post: softmax over the top-k logits (weights sum to 1);
    sigmoid: top-k of sigmoid scores, renormalised over the k chosen when k > 1 (DeepSeek-V3 style).
    Ties break towards the lower expert index (``torch.topk`` on CPU), identically on every rank."""
    logits = logits.float()
    if score == "softmax":
        probs = torch.softmax(logits, dim=-1)
        if pre_softmax:
            weights, experts = torch.topk(probs, k, dim=-1)
        else:
            top, experts = torch.topk(logits, k, dim=-1)
            weights = torch.softmax(top, dim=-1)
        return weights, experts, probs
    if score == "sigmoid":
        s = torch.sigmoid(logits)
        weights, experts = torch.topk(s, k, dim=-1)
        if k > 1:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights, experts, s / (s.sum(-1, keepdim=True) + 1e-20)
    raise ValueError(f"unknown moe_router_score '{score}' (softmax | sigmoid)")


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Switch/GShard: ``E · Σ_e f_e · P_e`` with f_e the fraction of the T·k routing slots that chose
    expert e (before capacity dropping: the load the router *asks* for) and P_e the mean score of e.
    Equals 1 for perfectly uniform routing; gradients flow through P only."""
    t, k = experts.shape
    f = torch.bincount(experts.reshape(-1), minlength=num_experts).to(probs.dtype) / (t * k)
    p = probs.mean(dim=0)
    return num_experts * (f * p).sum()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Router z-loss (ST-MoE): mean over tokens of logsumexp(logits)², keeps router logits small."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def expert_capacity(num_tokens: int, k: int, num_experts: int, factor: float) -> int:
    """Routing slots each expert accepts per micro-batch: ⌈factor · T·k / E⌉."""
    return max(1, int(math.ceil(factor * num_tokens * k / num_experts)))


def capacity_keep(experts: torch.Tensor, weights: torch.Tensor, num_experts: int, capacity: int) -> torch.Tensor:
    """Bool mask ``[T,k]`` of the routing slots kept: per expert, the ``capacity`` slots with the highest
    weight; equal weights keep the earlier token (then the lower slot). Deterministic: two stable sorts."""
    e = experts.reshape(-1)
    by_score = torch.argsort(-weights.detach().reshape(-1), stable=True)
    order = by_score[torch.argsort(e[by_score], stable=True)]
    counts = torch.bincount(e, minlength=num_experts)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(e.numel(), device=e.device) - starts[e[order]]
    keep = torch.zeros_like(e, dtype=torch.bool)
    keep[order] = rank < capacity
    return keep.view_as(experts)


def sort_by_expert(experts: torch.Tensor, weights: torch.Tensor, keep: Optional[torch.Tensor]):
    """Kept (expert, weight, token) routing slots, sorted by expert (stable: token order inside one)."""
    t, k = experts.shape
    e, w = experts.reshape(-1), weights.reshape(-1)
    tok = torch.arange(t, device=experts.device).repeat_interleave(k)
    if keep is not None:
        m = keep.reshape(-1)
        e, w, tok = e[m], w[m], tok[m]
    order = torch.argsort(e, stable=True)
    return e[order], w[order], tok[order]


def combine(ys: torch.Tensor, weights: torch.Tensor, tokens_idx: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``y[t] = Σ_slots weight · expert_output`` (dropped slots contribute nothing)."""
    out = ys.new_zeros(num_tokens, ys.size(-1))
    return out.index_add(0, tokens_idx, ys * weights.to(ys.dtype)[:, None])


# ----------------------------------------------------------------------------------- grouped experts


class _ContiguousGrad(torch.autograd.Function):
    """``torch._grouped_mm``'s CPU backward rejects expanded (stride-0) gradients: make them dense."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


_GROUPED_MM_OK: dict[tuple, bool] = {}


def _grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs forward and backward for this device and dtype (CPU: any float
    dtype in recent torch; CUDA: bf16 on Hopper and later). Probed once with a tiny call, then cached.
    The probe's backward runs under identity saved-tensor hooks: the first forward may sit inside an
    activation checkpoint, whose hooks would otherwise treat the probe as part of the checkpointed region."""
    key = (device.type, dtype)
    if key not in _GROUPED_MM_OK:
        ok = hasattr(torch, "_grouped_mm")
        if ok:
            try:
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    _probe_grouped_mm(device, dtype)
            except (RuntimeError, NotImplementedError, TypeError):
                ok = False
        _GROUPED_MM_OK[key] = ok
    return _GROUPED_MM_OK[key]


def _probe_grouped_mm(device: torch.device, dtype: torch.dtype) -> None:
    x = torch.ones(8, 16, device=device, dtype=dtype, requires_grad=True)
    w = torch.ones(2, 16, 16, device=device, dtype=dtype, requires_grad=True)
    offs = torch.tensor([4, 8], dtype=torch.int32, device=device)
    torch._grouped_mm(x, w, offs=offs).backward(torch.ones(8, 16, device=device, dtype=dtype))


def _grouped_mm_usable(x: torch.Tensor, *ws: torch.Tensor) -> bool:
    """``torch._grouped_mm`` needs 16-byte aligned row strides and a supported dtype; else bmm is used."""
    aligned = all((t.size(-1) * t.element_size()) % 16 == 0 for t in (x, *ws)) and \
        all((w.size(-2) * w.element_size()) % 16 == 0 for w in ws)
    return aligned and _grouped_mm_works(x.device, x.dtype)


class GroupedExperts(nn.Module):
    """The experts' MLPs as grouped weights ``w1 [E,h,f]`` (up), ``w3 [E,h,f]`` (gate, swiglu) and
    ``w2 [E,f,h]`` (down), no biases (Megatron's GroupedMLP). Expert parallelism keeps rows
    ``ep_slice`` of dim 0 and tensor parallelism splits f. ``forward`` takes tokens sorted by (local)
    expert with the per-expert counts and runs each matmul as one grouped call:
      * ``grouped_mm``: ``torch._grouped_mm`` over the ragged groups (no padding);
      * ``bmm``: scatter into a zero-padded ``[E, max_count, h]`` batch, one ``torch.bmm`` per matmul;
      * ``loop``: one matmul per expert over its contiguous slice (the reference the benchmark compares).
    """

    IMPLS = ("auto", "grouped_mm", "bmm", "loop")

    def __init__(self, cfg: ModelConfig, impl: str = "auto") -> None:
        super().__init__()
        e, h = cfg.num_experts, cfg.hidden_size
        f = cfg.moe_ffn_hidden_size or cfg.ffn_size
        if cfg.activation not in ("gelu", "gelu_tanh", "swiglu", "relu"):
            raise ValueError(f"unknown activation '{cfg.activation}' (gelu | gelu_tanh | swiglu | relu)")
        if impl not in self.IMPLS:
            raise ValueError(f"unknown grouped-expert impl '{impl}' ({' | '.join(self.IMPLS)})")
        self.activation, self.impl = cfg.activation, impl
        self.w1 = nn.Parameter(torch.empty(e, h, f))
        self.w3 = nn.Parameter(torch.empty(e, h, f)) if cfg.activation == "swiglu" else None
        self.w2 = nn.Parameter(torch.empty(e, f, h))
        for p in self.parameters():
            nn.init.normal_(p, std=cfg.init_std)  # default for a standalone module; initialize() overwrites it
            p.expert = True  # reduced over expert-data-parallel ranks, norm summed over EP

    @property
    def num_local(self) -> int:
        return self.w1.size(0)

    def _act(self, up: torch.Tensor, gate: Optional[torch.Tensor]) -> torch.Tensor:
        if gate is not None:
            return F.silu(gate) * up
        if self.activation == "relu":
            return F.relu(up)
        return F.gelu(up, approximate="tanh" if self.activation == "gelu_tanh" else "none")

    def forward(self, xs: torch.Tensor, counts: list[int]) -> torch.Tensor:
        impl = self.impl
        if impl == "auto":
            impl = "grouped_mm" if _grouped_mm_usable(xs, self.w1, self.w2) else "bmm"
        if xs.size(0) == 0:  # keep the graph (and its collectives' backward) connected
            return xs @ self.w1.sum(0) @ self.w2.sum(0) * 0.0
        return getattr(self, f"_{impl}")(xs, counts)

    def _loop(self, xs, counts):
        outs = []
        for e, x in enumerate(torch.split(xs, counts)):
            gate = x @ self.w3[e] if self.w3 is not None else None
            outs.append(self._act(x @ self.w1[e], gate) @ self.w2[e])
        return torch.cat(outs)

    def _grouped_mm(self, xs, counts):
        offs = torch.cumsum(torch.tensor(counts, dtype=torch.int32, device=xs.device), 0, dtype=torch.int32)

        def mm(x, w):
            return _ContiguousGrad.apply(torch._grouped_mm(x, w, offs=offs))
        gate = mm(xs, self.w3) if self.w3 is not None else None
        return mm(self._act(mm(xs, self.w1), gate), self.w2)

    def _bmm(self, xs, counts):
        n, h, el = xs.size(0), xs.size(1), self.num_local
        cap = max(counts)
        cnt = torch.tensor(counts, device=xs.device)
        expert_of = torch.repeat_interleave(torch.arange(el, device=xs.device), cnt)
        starts = torch.cumsum(cnt, 0) - cnt
        slot = expert_of * cap + torch.arange(n, device=xs.device) - starts[expert_of]
        xp = xs.new_zeros(el * cap, h).index_copy(0, slot, xs).view(el, cap, h)
        gate = torch.bmm(xp, self.w3) if self.w3 is not None else None
        yp = torch.bmm(self._act(torch.bmm(xp, self.w1), gate), self.w2)  # padding rows stay zero
        return yp.reshape(el * cap, -1)[slot]


# --------------------------------------------------------------------------------------------- layer


class LocalDispatcher:
    """All experts on this process, no tensor parallelism: the single-process behaviour.

    The interface expert parallelism implements: ``enter``/``exit`` bracket the experts' region (TP copy /
    sequence gather and the matching reduce), ``tp_size`` is how many ranks share one routing decision,
    and ``dispatch`` returns Σ_slots weight·expert(token) for every token of ``tokens``."""

    tp_size = 1

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def exit(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def dispatch(self, tokens, experts, weights, keep, module: GroupedExperts, num_experts: int):
        e, w, tok = sort_by_expert(experts, weights, keep)
        counts = torch.bincount(e, minlength=num_experts).tolist()
        return combine(module(tokens[tok], counts), w, tok, tokens.size(0))


def _check_config(cfg: ModelConfig) -> None:
    """Reject MoE settings that cannot work, naming the config key (a usage error: exit status 2)."""
    if not 1 <= cfg.moe_top_k <= cfg.num_experts:
        raise ConfigError(f"model.moe_top_k {cfg.moe_top_k} must be between 1 and model.num_experts "
                          f"{cfg.num_experts}")
    if cfg.moe_router_score not in ("softmax", "sigmoid"):
        raise ConfigError(f"model.moe_router_score '{cfg.moe_router_score}' must be softmax or sigmoid")
    if cfg.moe_dispatcher not in ("alltoall", "allgather"):
        raise ConfigError(f"model.moe_dispatcher '{cfg.moe_dispatcher}' must be alltoall or allgather")
    if cfg.moe_capacity_factor is not None and cfg.moe_capacity_factor <= 0:
        raise ConfigError(f"model.moe_capacity_factor {cfg.moe_capacity_factor} must be positive "
                          f"(or null for dropless)")


class MoELayer(nn.Module):
    """Router → top-k (→ capacity dropping) → grouped experts → weighted combine (+ shared expert)."""

    def __init__(self, cfg: ModelConfig, impl: str = "auto") -> None:
        super().__init__()
        _check_config(cfg)
        self.cfg = cfg
        self.num_experts, self.top_k = cfg.num_experts, cfg.moe_top_k
        self.router = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = GroupedExperts(cfg, impl)
        shared = cfg.moe_shared_expert_ffn_hidden_size
        self.shared_expert = MLP(cfg, shared) if shared else None
        self.dispatcher = LocalDispatcher()
        self.routing_log: Optional[list] = None  # tests: a list collects each forward's expert indices
        self._dropped: torch.Tensor | int = 0

    @property
    def last_dropped(self) -> int:
        """Routing slots dropped by the capacity limit in the last forward (read lazily: no GPU sync)."""
        return int(self._dropped)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg, disp = self.cfg, self.dispatcher
        xin = disp.enter(x)  # the whole micro-batch's tokens, identical on every TP rank
        b, s, h = xin.shape
        tokens = xin.reshape(b * s, h)
        logits = self.router(tokens)
        weights, experts, probs = route(logits, self.top_k, cfg.moe_router_score, cfg.moe_router_pre_softmax)
        keep = None
        if cfg.moe_capacity_factor is not None:
            cap = expert_capacity(b * s, self.top_k, self.num_experts, cfg.moe_capacity_factor)
            keep = capacity_keep(experts, weights, self.num_experts, cap)
            self._dropped = (~keep).sum()
        if self.routing_log is not None and self.training and not _in_backward():
            self.routing_log.append(experts.detach().clone())
        y = disp.dispatch(tokens, experts, weights, keep, self.experts, self.num_experts)
        out = disp.exit(y.view(b, s, h).to(x.dtype))
        if self.training:
            out = self._attach_aux(out, logits, probs, experts, disp.tp_size)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out

    def _attach_aux(self, out, logits, probs, experts, tp_size: int) -> torch.Tensor:
        """Add the weighted aux terms to the objective. Every TP rank computes the same value from the same
        tokens, but the router weight's gradient is summed over TP (its routing-path gradient is partial
        there), so each rank attaches 1/tp of it. Values are recorded once per forward that is not an
        activation recomputation (those run inside backward), also when a reentrant checkpoint runs the
        first forward without grad; the gradient hook is attached whenever grad is enabled."""
        cfg, terms = self.cfg, {}
        if cfg.moe_aux_loss_coeff:
            terms["moe_aux_loss"] = cfg.moe_aux_loss_coeff * load_balancing_loss(probs, experts, self.num_experts)
        if cfg.moe_z_loss_coeff:
            terms["moe_z_loss"] = cfg.moe_z_loss_coeff * z_loss(logits)
        if not terms:
            return out
        if not _in_backward():
            for name, v in terms.items():
                AUX.record(name, v)
        if not torch.is_grad_enabled():
            return out
        return _AttachAuxLoss.apply(out, sum(terms.values()) / tp_size)
