"""LoRA: low-rank adapters on the blocks' linear layers, the base frozen, under every parallel layout.

``y = W·x + (alpha/r)·B·A·dropout(x)`` with ``A [r, in]`` and ``B [out, r]`` (Hu et al. 2021). B starts at
zero, so the adapted model starts equal to its base; A is drawn whole (Kaiming-uniform, as Hugging Face PEFT
does) from a generator seeded by its name, then sliced, so every layout starts from the same adapters.

Targets use Megatron's names for the four linear layers of a block: ``qkv`` (q/k/v), ``proj`` (attention
output), ``fc1`` (MLP up, and gate when gated), ``fc2`` (MLP down); mwb keeps q/k/v and gate/up as separate
layers, so each gets its own adapter. An adapter follows its base layer's tensor-parallel split:

* column-parallel base (W split over its outputs): B is split the same way, A is replicated. Each TP rank's
  A-gradient is then a partial sum (B's rows live on different ranks), so A is marked like the
  sequence-parallel parameters whose partial gradients the optimizer all-reduces over TP.
* row-parallel base (W split over its inputs, the output summed over TP): A is split over its inputs, and
  the rank-r intermediate ``A_r·x_r`` is summed over TP (reduce-scattered along the sequence under sequence
  parallelism, like the base output) before the replicated B. B's gradient is whole on every rank, or a
  partial sum over sequence slices under SP (marked as the row-parallel bias is).

Adapters are ``lora_A``/``lora_B`` parameters of the base linear layer (``layers.3.attn.q_proj.lora_A``), and
their forward is a forward hook on it, so the base layer, its TP plan and fp8 GEMM stay as they are. The
parameters frozen are those of the pretrained model (every GPT/BERT/T5 module in the chunk), except the
ones the caller keeps (parameters a task adds, or that the checkpoint did not hold, train in full): a task
head around the model stays trainable. The optimizer, gradient synchronisation and checkpoints see only
trainable parameters; checkpoints mark frozen ones ``lora_frozen`` and leave them out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..config import ConfigError, LoRAConfig
from ..models.init import canonical_name, generator_for, shard_of
from ..models.mlp import MLP
from ..models.transformer import Attention, TiedEmbeddingStage
from .collectives import reduce_from_tp, reduce_scatter_to_sequence
from .random import model_parallel_rng
from .stage_copies import is_secondary_copy

# target → (module class, its linear layers)
TARGETS = {"qkv": (Attention, ("q_proj", "k_proj", "v_proj")), "proj": (Attention, ("o_proj",)),
           "fc1": (MLP, ("up_proj", "gate_proj")), "fc2": (MLP, ("down_proj",))}
SUFFIXES = (".lora_A", ".lora_B")


def parse_targets(spec: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in str(spec).split(",") if t.strip())
    bad = [t for t in names if t not in TARGETS]
    if bad or not names:
        raise ConfigError(f"--lora-targets {spec!r}: choose among {','.join(TARGETS)} (comma-separated)")
    return names


def check_config(cfg: LoRAConfig) -> None:
    """One clear line for a LoRA setting that cannot work."""
    if cfg.rank < 0:
        raise ConfigError(f"--lora rank must be positive, got {cfg.rank}")
    if cfg.alpha is not None and cfg.alpha <= 0:
        raise ConfigError(f"--lora-alpha must be positive, got {cfg.alpha}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"--lora-dropout must be in [0, 1), got {cfg.dropout}")
    parse_targets(cfg.targets)


def is_adapter(name: str) -> bool:
    return name.endswith(SUFFIXES)


class LoRAHook:
    """Forward hook adding ``scale · B·A·dropout(x)`` to a linear layer's output (module docstring)."""

    def __init__(self, kind: str, scale: float, dropout: float, group=None, sp: bool = False) -> None:
        self.kind, self.scale, self.dropout, self.group, self.sp = kind, scale, dropout, group, sp

    def __call__(self, module: nn.Module, args, output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        if self.dropout > 0.0 and module.training:
            if self.kind == "row":  # this rank's slice of the input features: its own mask stream
                with model_parallel_rng():
                    x = F.dropout(x, self.dropout, True)
            else:  # the same input on every TP rank: the default stream, equal over TP
                x = F.dropout(x, self.dropout, True)
        z = F.linear(x, module.lora_A)
        if self.kind == "row":
            z = reduce_scatter_to_sequence(z, self.group) if self.sp else reduce_from_tp(z, self.group)
        return output + F.linear(z, module.lora_B) * self.scale


@dataclass
class LoRAInfo:
    """What :func:`apply_lora` did to one chunk: where the pretrained model sits (name prefixes of the GPT/
    BERT/T5 modules, ``""`` when the chunk is the model) and the adapters' names."""
    prefixes: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)


def _mark(p: nn.Parameter, tp_dim, full_shape, tp_rank: int, partial_over_tp: bool) -> None:
    p.tp_dim, p.full_shape, p.tp_rank = tp_dim, tuple(full_shape), tp_rank
    p.sequence_parallel = partial_over_tp  # the optimizer all-reduces such gradients over TP


def _kind(linear: nn.Module, state) -> str:
    dim = getattr(linear.weight, "tp_dim", None)
    if state.tp_size == 1 or dim is None:
        return "plain"
    return "column" if dim == 0 else "row"


def _backbones(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The outermost GPT/BERT/T5 modules of ``model``, with their name prefixes."""
    out: list[tuple[str, nn.Module]] = []
    for name, m in model.named_modules():  # parents come before their children
        prefix = name + "." if name else ""
        if isinstance(m, TiedEmbeddingStage) and not any(prefix.startswith(p) for p, _ in out):
            out.append((prefix, m))
    return out


@torch.no_grad()
def _add_adapter(linear: nn.Module, name: str, cfg: LoRAConfig, state, seed: int) -> None:
    r, kind = cfg.rank, _kind(linear, state)
    w = linear.weight
    out_local, in_local = w.shape
    out_full, in_full = getattr(w, "full_shape", tuple(w.shape))
    tp_rank = state.tp_rank
    A = nn.Parameter(torch.empty(r, in_local, device=w.device, dtype=w.dtype))
    B = nn.Parameter(torch.zeros(out_local, r, device=w.device, dtype=w.dtype))
    if kind == "row":
        _mark(A, 1, (r, in_full), tp_rank, False)
        _mark(B, None, (out_full, r), tp_rank, state.sp)
    elif kind == "column":
        _mark(A, None, (r, in_full), tp_rank, True)
        _mark(B, 0, (out_full, r), tp_rank, False)
    else:
        _mark(A, None, (r, in_full), tp_rank, False)
        _mark(B, None, (out_full, r), tp_rank, False)
    bound = 1.0 / math.sqrt(in_full)  # kaiming_uniform_(a=√5), PEFT's init of lora_A
    full = torch.empty(r, in_full).uniform_(-bound, bound, generator=generator_for(seed, name + ".lora_A"))
    A.copy_(shard_of(full, A).to(A.dtype))
    linear.register_parameter("lora_A", A)
    linear.register_parameter("lora_B", B)
    linear.register_forward_hook(LoRAHook(kind, cfg.scale, cfg.dropout, state.tp_group, state.sp))


def apply_lora(model: nn.Module, cfg: LoRAConfig, state, seed: int, keep: Iterable[str] = ()) -> LoRAInfo:
    """Freeze the pretrained model inside ``model`` (except the names in ``keep``, relative to it) and add
    adapters to the target layers; returns where they went. ``model`` is one built, initialised chunk."""
    check_config(cfg)
    keep = set(keep)
    targets = parse_targets(cfg.targets)
    backbones = _backbones(model)
    if not backbones:
        raise ConfigError("LoRA adapts GPT, BERT and T5 models; this model has none")
    info = LoRAInfo(prefixes=[p for p, _ in backbones])
    for prefix, backbone in backbones:
        tied = bool(getattr(getattr(backbone, "cfg", None), "tie_embeddings", False))
        for name, p in backbone.named_parameters():
            if name in keep or canonical_name(name, tied) in keep:
                continue
            p.requires_grad_(False)
            p.lora_frozen = True
        for mname, module in backbone.named_modules():
            for target in targets:
                cls, linears = TARGETS[target]
                if not isinstance(module, cls):
                    continue
                for lname in linears:
                    linear = getattr(module, lname, None)
                    if linear is None or hasattr(linear, "lora_A"):
                        continue
                    full = f"{prefix}{mname}.{lname}"
                    _add_adapter(linear, full, cfg, state, seed)
                    info.adapters.append(full)
    return info


def parameter_counts(chunks, state, tied: bool) -> dict[str, int]:
    """Trainable and frozen parameters of the whole model (every rank's chunks; call on every rank), each
    element counted once: as a checkpoint writes it (TP-replicated by TP rank 0, data-parallel replicas by
    replica 0, a tied or stage copy once)."""
    c = state.coords
    seen, trainable, frozen = set(), 0, 0
    for chunk in chunks:
        for name, p in chunk.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if canonical_name(name, tied) != name or is_secondary_copy(p) or c.get("cp", 0):
                continue
            if getattr(p, "tp_dim", None) is None and c.get("tp", 0):
                continue
            if (c.get("edp", 0) if getattr(p, "expert", False) else c.get("dp", 0)):
                continue
            if p.requires_grad:
                trainable += p.numel()
            else:
                frozen += p.numel()
    buf = torch.tensor([trainable, frozen], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(buf)
    return {"trainable": int(buf[0]), "frozen": int(buf[1])}


def merge_adapters(tensors: dict, scale: float) -> dict:
    """Global tensors with every adapter folded into its base weight (``W + scale·B·A``, in fp32, kept in
    W's dtype) and the adapter tensors dropped."""
    out = {k: v for k, v in tensors.items() if not is_adapter(k)}
    for key, a in tensors.items():
        if not key.endswith(".lora_A"):
            continue
        module = key[: -len(".lora_A")]
        b = tensors.get(module + ".lora_B")
        w = out.get(module + ".weight")
        if b is None or w is None:
            missing = module + (".lora_B" if b is None else ".weight")
            raise KeyError(missing)
        out[module + ".weight"] = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
    return out

