"""``--fsdp``: parameters, gradients and optimizer state sharded over the data-parallel group with FSDP2.

``torch.distributed.fsdp.fully_shard`` is applied to every transformer block and then to each model chunk
(the root holds the embedding, the final norm and the tied output head, which must stay in one group). Each
parameter becomes a DTensor sharded along dim 0 over a 1-D mesh of this rank's data-parallel group; the
forward all-gathers a block's parameters just before it runs and frees them after, the backward gathers them
again and reduce-scatters the gradients. Tensor parallelism composes because mwb's TP shards are plain
local tensors: FSDP shards each TP shard further over DP (Megatron's TP + FSDP layout).

What is kept from mwb's own optimizer path: the loss is a token sum normalised by the global batch's tokens,
so the reduce-scatter must sum, not average (``set_gradient_divide_factor(1)`` with SUM-only collectives); the mwb attributes of each
parameter (``tp_dim``, ``sequence_parallel``, ...) are copied onto the sharded parameters, which FSDP creates
anew, because the optimizer (:mod:`mwb.core.optim.fsdp`), the gradient norm and checkpoints read them.

Precision: ``fp32`` keeps fp32 everywhere; ``bf16`` keeps the sharded parameters (the optimizer's masters) in
fp32 and computes with bf16 copies, reducing gradients in fp32 (``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)``). Not supported, each refused with one line: pipeline, context and expert parallelism
(FSDP2 here shards over a plain DP group), the distributed optimizer (FSDP already shards the state), fp16
(dynamic loss scaling), fp8, and LoRA.

``torch.distributed.fsdp`` itself is imported lazily here, so every process that may use it imports it before
``init_process_group`` (importing it later has aborted gloo processes at exit): ``training/launch.py`` and
the test spawn helper in ``tests/helpers/distributed.py`` do.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..errors import ConfigError, LayoutError


def check_config(cfg) -> None:
    """One line for every setting ``--fsdp`` does not support (called where the layout is validated)."""
    p, t = cfg.parallel, cfg.train
    if not p.fsdp:
        return
    for flag, value in (("--pp", p.pp), ("--cp", p.cp), ("--ep", p.ep), ("--vpp", p.vpp)):
        if value != 1:
            raise LayoutError(f"--fsdp shards over the data-parallel group only; {flag} {value} is not "
                              f"supported with it (use {flag} 1, or drop --fsdp)")
    if p.distributed_optimizer:
        raise ConfigError("--fsdp already shards optimizer state over data-parallel ranks; drop "
                          "--distributed-optimizer")
    if t.precision not in ("fp32", "bf16"):
        raise ConfigError(f"--fsdp trains in fp32 or bf16 (fp32 reduction), not --precision {t.precision}")
    if cfg.lora.rank:
        raise ConfigError("--fsdp with --lora is not supported; LoRA trains few parameters, use plain data "
                          "parallelism")


def build_dtype(cfg, dtype: torch.dtype) -> torch.dtype:
    """The dtype to build the model in: FSDP keeps fp32 sharded parameters and casts for compute."""
    return torch.float32 if cfg.parallel.fsdp else dtype


def mixed_precision(precision: str):
    from torch.distributed.fsdp import MixedPrecisionPolicy
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def dp_mesh(state, device_type: str):
    """A 1-D DeviceMesh over this rank's data-parallel group (one process: a mesh of one)."""
    from torch.distributed.device_mesh import DeviceMesh
    import torch.distributed as dist
    group = state.group("dp_cp")
    if group is None:
        group = dist.new_group([dist.get_rank()]) if dist.is_initialized() else None
    return DeviceMesh.from_group(group, device_type=device_type)


def _attrs(chunk: nn.Module) -> dict:
    """The mwb attributes of each parameter (``tp_dim``, ``sequence_parallel``, ...), by name."""
    return {name: {k: v for k, v in p.__dict__.items() if not k.startswith("_")}
            for name, p in chunk.named_parameters()}


def apply_fsdp(chunks, state, precision: str, device_type: str = "cpu", block_types=()) -> Optional[object]:
    """Shard every chunk in place (``block_types``: the module classes each get their own FSDP group);
    returns the mesh. The chunks keep their names and state-dict keys."""
    from torch.distributed.fsdp import fully_shard
    mesh = dp_mesh(state, device_type)
    mp = mixed_precision(precision)
    for chunk in chunks:
        saved = _attrs(chunk)
        for module in list(chunk.modules()):
            if module is not chunk and isinstance(module, tuple(block_types)):
                fully_shard(module, mesh=mesh, mp_policy=mp)
        fully_shard(chunk, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
        for m in chunk.modules():
            if hasattr(m, "set_gradient_divide_factor"):  # token-sum loss: gradients are summed over DP, as
                m.set_gradient_divide_factor(1.0)         # plain SUM (gloo has no PREMUL_SUM; NCCL copies less)
                m.set_force_sum_reduction_for_comms(True)
        for name, p in chunk.named_parameters():
            for k, v in saved.get(name, {}).items():
                setattr(p, k, v)
    return mesh


def is_sharded(p) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(p, DTensor)


def local_shard(full: torch.Tensor, p) -> torch.Tensor:
    """This rank's dim-0 piece of ``full`` (the TP-local tensor) for the FSDP parameter ``p``: torch.chunk's
    split, as FSDP2 shards (ranks past the last chunk hold none)."""
    mesh = p.device_mesh
    n, r = mesh.size(), mesh.get_local_rank()
    parts = torch.chunk(full, n, dim=0)
    if r < len(parts):
        return parts[r]
    return full.new_empty((0, *full.shape[1:]))


def assign(p, full: torch.Tensor) -> None:
    """Set parameter (or optimizer-state DTensor) ``p`` from its TP-local whole value ``full``."""
    with torch.no_grad():
        if is_sharded(p):
            p.to_local().copy_(local_shard(full, p))
        else:
            p.data.copy_(full)


def gather(t) -> torch.Tensor:
    """The TP-local whole value of a sharded tensor (an all-gather over DP: call on every rank in order)."""
    return t.full_tensor() if is_sharded(t) else t
