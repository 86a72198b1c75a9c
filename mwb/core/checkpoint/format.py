"""On-disk checkpoint layout (per-rank shards, same-layout resume).

``step_N/metadata.json``  layout (world size, tp/pp/vpp/ep/dp, precision), step, one entry per rank file
``step_N/rank_XXXXX.pt``  that rank's model shards (global parameter names), optimizer pieces, loss scaler,
                          RNG streams; written atomically
``latest``                the name of the newest complete step directory
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ..errors import CheckpointError
from ..parallel.random import capture_rng_state, restore_rng_state

FORMAT = "mwb-checkpoint-v1"


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def _layout(trainer) -> dict:
    d = trainer.dims
    return {"world_size": d.world_size, "tp": d.tp, "pp": d.pp, "vpp": d.vpp, "cp": d.cp, "ep": d.ep,
            "dp": d.dp, "sp": d.sp, "distributed_optimizer": trainer.optimizer.distributed,
            "precision": trainer.cfg.train.precision}


def _rng_to_safe(state: dict) -> dict:
    np_state = state["numpy"]
    out = dict(state)
    out["numpy"] = (np_state[0], torch.from_numpy(np.asarray(np_state[1]).astype(np.int64)), int(np_state[2]),
                    int(np_state[3]), float(np_state[4]))
    return out


def _rng_from_safe(state: dict) -> dict:
    out = dict(state)
    n = state["numpy"]
    out["numpy"] = (n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4])
    return out


def _atomic_torch_save(obj, path: str) -> None:
    tmp = path + ".partial"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_write_text(path: str, text: str) -> None:
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(trainer, root: str, keep_last: int = 0) -> str:
    """Write ``root/step_N`` for the trainer's current step on every rank; returns its path."""
    world, rank, step = trainer.dims.world_size, trainer.state.rank, trainer.step
    final = os.path.join(root, f"step_{step}")
    tmp = os.path.join(root, f".step_{step}.incomplete")
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    _barrier(world)
    model_sd = {}
    for chunk in trainer.chunks:
        model_sd.update({k: v.detach().clone() for k, v in chunk.state_dict().items()})
    payload = {"format": FORMAT, "step": step, "model": model_sd, "optimizer": trainer.optimizer.state_dict(),
               "scaler": trainer.scaler.state_dict(), "rng": _rng_to_safe(capture_rng_state()),
               "coords": dict(trainer.state.coords)}
    _atomic_torch_save(payload, os.path.join(tmp, f"rank_{rank:05d}.pt"))
    _barrier(world)
    if rank == 0:
        meta = {"format": FORMAT, "step": step, "layout": _layout(trainer),
                "files": [f"rank_{r:05d}.pt" for r in range(world)]}
        _atomic_write_text(os.path.join(tmp, "metadata.json"), json.dumps(meta, indent=2))
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
        _atomic_write_text(os.path.join(root, "latest"), f"step_{step}\n")
        if keep_last > 0:
            _prune(root, keep_last)
    _barrier(world)
    return final


def _prune(root: str, keep_last: int) -> None:
    steps = sorted((int(n.split("_")[1]), n) for n in os.listdir(root)
                   if n.startswith("step_") and n.split("_")[1].isdigit())
    for _, name in steps[:-keep_last]:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def latest_dir(root: str) -> Optional[str]:
    """The newest complete checkpoint directory under ``root`` (``OUT/checkpoints``), or None."""
    path = os.path.join(root, "latest")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        name = f.read().strip()
    d = os.path.join(root, name)
    if not os.path.isdir(d):
        raise CheckpointError(f"{path} names '{name}', which does not exist under {root}")
    return d


def load(trainer, directory: str) -> int:
    """Restore model, optimizer, scaler, RNG streams and step; returns the step."""
    meta_path = os.path.join(directory, "metadata.json")
    if not os.path.exists(meta_path):
        raise CheckpointError(f"checkpoint {directory} has no metadata.json: it is incomplete or not an mwb "
                              f"checkpoint")
    with open(meta_path) as f:
        try:
            meta = json.load(f)
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{meta_path} is not valid JSON ({e})") from None
    have, want = meta.get("layout", {}), _layout(trainer)
    diff = {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}
    if diff:
        detail = ", ".join(f"{k}: saved {a}, now {b}" for k, (a, b) in diff.items())
        raise CheckpointError(f"checkpoint {directory} was saved in another layout ({detail}); resume with the "
                              f"same layout")
    path = os.path.join(directory, f"rank_{trainer.state.rank:05d}.pt")
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint shard missing: {path}")
    try:
        payload = torch.load(path, map_location=trainer.device, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"checkpoint shard {path} cannot be read ({type(e).__name__}: {e})") from None
    for chunk in trainer.chunks:
        sd = {k: payload["model"][k] for k in chunk.state_dict() if k in payload["model"]}
        missing = set(chunk.state_dict()) - set(sd)
        if missing:
            raise CheckpointError(f"checkpoint shard {path} lacks {sorted(missing)[:3]}")
        chunk.load_state_dict(sd)
    trainer.optimizer.load_state_dict(payload["optimizer"])
    trainer.scaler.load_state_dict(payload["scaler"])
    restore_rng_state(_rng_from_safe(payload["rng"]))
    trainer.step = int(payload["step"])
    return trainer.step
