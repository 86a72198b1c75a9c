"""The optimizer of an ``--fsdp`` run: torch's own update on the FSDP2-sharded fp32 parameters.

FSDP has already reduce-scattered each gradient over data-parallel ranks (summed, in fp32) by the time the
step runs, so what remains of :class:`~mwb.core.optim.optimizer.DistributedOptimizer`'s step is:
  1. sequence-parallel parameters: all-reduce their partial gradient shards over TP;
  2. the global gradient norm: Σ of squares of each rank's gradient shards (a TP-replicated parameter counted
     by TP rank 0 only), summed over the DP and TP groups; non-finite: skip the step;
  3. unscale, token normalisation and clipping as one multiply; then AdamW/Adam/SGD with weight decay on
     matrices only (Megatron's rule), which is the same arithmetic the flat optimizer applies.
The sharded parameters are the fp32 masters, so no second copy exists. Checkpoints see the same per-piece
interface as the flat optimizer through :meth:`gathered_pieces` (one whole piece per parameter, gathered
over DP), which makes an FSDP checkpoint a plain data-parallel one that every layout loads.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from ..config import OptimConfig
from ..parallel.collectives import all_reduce_no_grad
from ..parallel.fsdp import assign, gather, local_shard
from .optimizer import Piece, no_weight_decay


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class FSDPOptimizer:
    fsdp = True
    distributed = False  # what the checkpoint layout records: its optimizer state is saved whole

    def __init__(self, model: nn.Module, cfg: OptimConfig, state) -> None:
        self.model, self.cfg, self.state = model, cfg, state
        self.named: list[tuple[str, nn.Parameter]] = []
        seen = set()
        for name, p in model.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                self.named.append((name, p))
        decay = [p for n, p in self.named if not no_weight_decay(n, p)]
        rest = [p for n, p in self.named if no_weight_decay(n, p)]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
        if cfg.name == "adamw":
            self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
        elif cfg.name == "adam":
            self.optimizer = torch.optim.Adam(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
        elif cfg.name == "sgd":
            self.optimizer = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, foreach=False)
        else:
            raise ValueError(f"unknown optimizer '{cfg.name}' (adamw | adam | sgd)")
        self.found_inf_steps = 0

    def zero_grad(self) -> None:
        for _, p in self.named:
            p.grad = None

    @torch.no_grad()
    def _grad_norm_sq(self) -> float:
        st = self.state
        dev = self.named[0][1].device if self.named else torch.device("cpu")
        sq = torch.zeros((), dtype=torch.float64, device=dev)
        for _, p in self.named:
            if p.grad is None or (getattr(p, "tp_dim", None) is None and st.tp_rank != 0):
                continue
            sq += torch.linalg.vector_norm(_local(p.grad), dtype=torch.float64).square()
        all_reduce_no_grad(sq, st.group("dp_cp"))
        all_reduce_no_grad(sq, st.group("tp_pp"))
        return sq.item()

    @torch.no_grad()
    def step(self, lr: float, loss_scale: float = 1.0, grad_scale: float = 1.0) -> tuple[bool, float]:
        """Same contract as the flat optimizer's: returns (updated, grad norm before clipping)."""
        tp = self.state.tp_group
        if tp is not None:
            for _, p in self.named:
                if p.grad is not None and getattr(p, "sequence_parallel", False):
                    dist.all_reduce(_local(p.grad), group=tp)
        for _, p in self.named:
            if p.grad is None:  # no gradient reached it this step: a zero one (the flat buffers do the same)
                p.grad = torch.zeros_like(p)
        factor = grad_scale / loss_scale
        total = self._grad_norm_sq()
        norm = math.sqrt(total) * abs(factor) if math.isfinite(total) else float("inf")
        if not math.isfinite(norm):
            self.found_inf_steps += 1
            return False, norm
        if self.cfg.clip_grad and self.cfg.clip_grad > 0 and norm > self.cfg.clip_grad:
            factor *= self.cfg.clip_grad / (norm + 1e-6)
        for _, p in self.named:
            if factor != 1.0:
                _local(p.grad).mul_(factor)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.step()
        return True, norm

    # ------------------------------------------------------------------------------------- checkpoints
    def gathered_pieces(self) -> tuple[dict, list[Piece], dict]:
        """(``id → (name, whole parameter)``, one whole :class:`Piece` per parameter, ``id(piece) → its
        optimizer state``), every sharded tensor gathered over DP. Collective: call on every rank."""
        params, pieces, states = {}, [], {}
        for name, p in self.named:
            whole = nn.Parameter(gather(p.detach()).clone(), requires_grad=False)
            whole.__dict__.update({k: v for k, v in p.__dict__.items() if not k.startswith("_")})
            params[id(whole)] = (name, whole)
            flat = whole.data.view(-1)
            pc = Piece(name, whole, 0, flat.numel(), flat, flat, 0, True)
            pieces.append(pc)
            states[id(pc)] = {k: (gather(v).reshape(-1) if torch.is_tensor(v) and v.dim() else v)
                              for k, v in self.optimizer.state.get(p, {}).items()}
        return params, pieces, states

    @torch.no_grad()
    def load_whole(self, name_to_state) -> None:
        """Set each parameter's state from its TP-local whole tensors: ``name_to_state(name, p) → ({kind: tensor},
        {scalar: value})`` with ``kind`` ``master`` (the weights) or an element-wise state (``exp_avg``...)."""
        for name, p in self.named:
            states, scalars = name_to_state(name, p)
            st = {}
            for kind, full in states.items():
                if kind == "master":
                    assign(p, full.to(p.dtype))
                else:
                    t = torch.zeros_like(p)
                    _local(t).copy_(local_shard(full.to(p.dtype), p))
                    st[kind] = t
            st.update(scalars)
            if st:
                self.optimizer.state[p] = st
            else:
                self.optimizer.state.pop(p, None)
