"""Writing checkpoints: every rank its own shards, rank 0 the metadata, one rename to make it visible.

Each tensor element is written once. A rank writes a parameter only if it is the first holder of that
shard: TP-replicated parameters by TP rank 0, data-parallel replicas by data-parallel rank 0 (expert
parameters: expert-data-parallel rank 0), a tied output-head copy on the last pipeline stage not at all
(it equals the word embedding), a parameter several stages hold (T5's bias tables) by its primary copy
only. Optimizer state follows the same rule, except that with the distributed optimizer every
data-parallel rank writes the piece of the flat buffer it owns. Each piece records the
rectangle of the global tensor (model weights) or the element range of the local shard (optimizer state)
it holds, so any layout can reassemble it (:mod:`.shards`, :mod:`.reader`).

A LoRA run (:mod:`mwb.core.parallel.lora`) writes what trains (adapters, a task's new head) and leaves its
frozen base out: ``metadata.json`` names the base under ``lora`` (with where it sits in the run's model and
the parameter counts), and :func:`mwb.core.compose.full_state` merges the two back. Every checkpoint also
records ``consumed_samples``, which a batch-size ramp-up resumes from.

Order of events, so that a crash at any point leaves no checkpoint that looks complete:
shards into ``.step_N.incomplete/`` → metadata.json → rename to ``step_N`` → ``latest`` → prune.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from typing import Iterable, Optional

import torch
import torch.distributed as dist

from ..parallel.random import capture_rng_state
from ..parallel.stage_copies import is_secondary_copy
from ..atomic import atomic_write_text
from .format import (FORMAT, METADATA, TOKENIZER_SIBLINGS, commit_directory, copy_extra, rng_split, shard_name,
                     staging_dir, write_safetensors)
from .shards import canonical, describe, full_shape, unpadded_shape

ExtraFiles = Optional[dict]  # name in the checkpoint → a file, a directory, or a list of files


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def layout_of(trainer) -> dict:
    d = trainer.dims
    return {"world_size": d.world_size, "tp": d.tp, "pp": d.pp, "vpp": d.vpp, "cp": d.cp, "ep": d.ep,
            "dp": d.dp, "sp": d.sp, "order": d.order, "distributed_optimizer": trainer.optimizer.distributed,
            "precision": trainer.cfg.train.precision, "fsdp": bool(getattr(trainer.optimizer, "fsdp", False))}


def named_parameters(chunks) -> dict:
    """``id(param) → (global name, param)`` over every chunk (names are layout-independent)."""
    out = {}
    for chunk in chunks:
        for name, p in chunk.named_parameters():
            out.setdefault(id(p), (name, p))
    return out


def _is_writer(p, coords: dict, distributed_optimizer: bool = False) -> bool:
    if is_secondary_copy(p):  # another pipeline stage holds the same parameter and writes it
        return False
    if getattr(p, "tp_dim", None) is None and coords.get("tp", 0) != 0:
        return False
    if coords.get("cp", 0) != 0 and not distributed_optimizer:
        return False
    if distributed_optimizer:  # every rank of the reduction group owns a distinct piece
        return True
    replica = coords.get("edp", 0) if getattr(p, "expert", False) else coords.get("dp", 0)
    return replica == 0


def _entry(index: dict, name: str, p, vocab: int) -> dict:
    e = index.setdefault(name, {"shape": list(unpadded_shape(name, p, vocab)), "padded_shape": list(full_shape(p)),
                                "dtype": str(p.dtype).replace("torch.", ""),
                                "expert": bool(getattr(p, "expert", False)), "chunks": [], "optim": []})
    return e


def collect(trainer, file: str) -> tuple[dict, dict]:
    """(tensors to write, index of what they are) for this rank."""
    cfg, coords = trainer.cfg, trainer.state.coords
    tied, vocab = cfg.model.tie_embeddings, trainer.spec.vocab_size
    params = named_parameters(trainer.chunks)
    opt = trainer.optimizer
    if getattr(opt, "fsdp", False):  # --fsdp: every parameter and its state gathered over DP, saved whole
        params, pieces, states = opt.gathered_pieces()
        piece_state = lambda pc: states[id(pc)]  # noqa: E731
    else:
        pieces, piece_state = opt.pieces, opt.piece_state
    tensors: dict[str, torch.Tensor] = {}
    index: dict[str, dict] = {}
    for name, p in params.values():
        if canonical(name, tied) != name or not _is_writer(p, coords) or getattr(p, "lora_frozen", False):
            continue  # (a LoRA run's frozen base is not copied: the checkpoint names it instead)
        key = f"model/{name}"
        tensors[key] = p.detach()
        _entry(index, name, p, vocab)["chunks"].append({"file": file, "key": key, **describe(p)})
    for chunk in trainer.chunks:  # persistent buffers: replicated, written by the first holder
        pnames = {n for n, _ in chunk.named_parameters(remove_duplicate=False)}
        for name, b in chunk.state_dict().items():
            if name in pnames or name in index or coords.get("tp", 0) or coords.get("dp", 0):
                continue
            key = f"model/{name}"
            tensors[key] = b.detach()
            _entry(index, name, b, None)["chunks"].append({"file": file, "key": key, **describe(b)})
    for pc in pieces:
        name, p = params[id(pc.param)]
        if canonical(name, tied) != name or not _is_writer(p, coords, opt.distributed):
            continue
        keys, scalars = {}, {}
        base = f"optim/{name}/{pc.lo}"
        keys["master"] = f"{base}/master"
        tensors[keys["master"]] = pc.master.detach()
        for k, v in piece_state(pc).items():
            if torch.is_tensor(v) and v.shape == pc.master.shape:
                keys[k] = f"{base}/{k}"
                tensors[keys[k]] = v.detach()
            elif torch.is_tensor(v):
                scalars[k] = {"value": v.item(), "dtype": str(v.dtype).replace("torch.", "")}
            else:
                scalars[k] = {"value": v, "dtype": None}
        d = describe(p)
        _entry(index, name, p, vocab)["optim"].append(
            {"file": file, "lo": pc.lo, "hi": pc.hi, "keys": keys, "scalars": scalars,
             "local": {"offsets": d["offsets"], "shape": d["shape"], "tp": d["tp"], "ep": d["ep"]}})
    return tensors, index


def _gather(obj, world: int) -> list:
    if world == 1:
        return [obj]
    out = [None] * world if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def _merge(entries: list[dict]) -> dict:
    tensors: dict[str, dict] = {}
    for e in entries:
        for name, t in e["tensors"].items():
            cur = tensors.setdefault(name, {k: v for k, v in t.items() if k not in ("chunks", "optim")})
            cur.setdefault("chunks", []).extend(t["chunks"])
            cur.setdefault("optim", []).extend(t["optim"])
    return dict(sorted(tensors.items()))


def config_tree(cfg) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def _write_extra(tmp: str, extra_files: ExtraFiles) -> dict:
    out = {}
    for key, src in (extra_files or {}).items():
        if not src:
            continue
        out[key] = copy_extra(src, os.path.join(tmp, key), TOKENIZER_SIBLINGS if key == "tokenizer" else ())
    return out


def save(trainer, root: str, keep_last: int = 0, extra_files: ExtraFiles = None) -> str:
    """Write ``root/step_N`` for the trainer's current step (call on every rank); returns its path.

    ``extra_files`` maps a name to a file, directory or list of files copied into ``step_N/<name>/`` so the
    checkpoint can be used alone; ``{"tokenizer": path}`` makes it the checkpoint's tokenizer. (The package's
    ``checkpoint.save`` is :func:`.async_save.save`, which calls this one unless ``train.async_save``.)
    """
    world = trainer.dims.world_size
    tmp, final = stage(trainer, root)
    file = shard_name(trainer.state.rank)
    tensors, entry = snapshot(trainer, file, copy=False)
    entry["bytes"] = write_safetensors(tensors, os.path.join(tmp, file))
    entries = _gather(entry, world)
    if trainer.state.rank == 0:
        commit(trainer, root, tmp, final, metadata(trainer, entries), keep_last, extra_files)
    _barrier(world)
    return final


def stage(trainer, root: str) -> tuple[str, str]:
    """(staging directory, final directory) of this step's checkpoint; rank 0 empties the staging one."""
    step = trainer.step
    final = os.path.join(root, f"step_{step}")
    tmp = os.path.join(root, f".step_{step}.incomplete")
    if trainer.state.rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    _barrier(trainer.dims.world_size)
    return tmp, final


def snapshot(trainer, file: str, copy: bool) -> tuple[dict, dict]:
    """This rank's tensors (copied to CPU when ``copy``, so training may change its own) and its metadata
    entry (``bytes`` left for the writer to fill in)."""
    tensors, index = collect(trainer, file)
    rng_tensors, rng_rest = rng_split(capture_rng_state())
    tensors.update(rng_tensors)
    if copy:
        tensors = {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}
    return tensors, {"rank": trainer.state.rank, "coords": dict(trainer.state.coords), "tensors": index,
                     "rng": rng_rest}


def metadata(trainer, entries: list[dict]) -> dict:
    """``metadata.json`` of the trainer's current step from every rank's entry."""
    cfg, step = trainer.cfg, trainer.step
    meta = {
        "format": FORMAT, "step": step, "layout": layout_of(trainer), "arch": cfg.model.arch,
        "vocab_size": trainer.spec.vocab_size, "config": config_tree(cfg),
        "tokenizer": None, "extra_files": {},
        "optimizer": {"name": cfg.optim.name, "found_inf_steps": trainer.optimizer.found_inf_steps},
        "scaler": trainer.scaler.state_dict(),
        "files": {shard_name(e["rank"]): {"rank": e["rank"], "coords": e["coords"], "bytes": e.get("bytes")}
                  for e in entries},
        "rng": {str(e["rank"]): e["rng"] for e in entries},
        "consumed_samples": int(getattr(trainer, "consumed_samples", step * cfg.train.global_batch_size)),
        "tensors": _merge(entries),
    }
    lora = getattr(trainer, "lora", None)
    if lora:
        meta["lora"] = dict(lora)
    return meta


def commit(trainer, root: str, tmp: str, final: str, meta: dict, keep_last: int,
           extra_files: ExtraFiles) -> None:
    """Rank 0, once every shard is in ``tmp``: extra files, metadata.json, rename, ``latest``, prune."""
    extra = _write_extra(tmp, extra_files)
    meta.update(tokenizer=extra.get("tokenizer"), extra_files=extra)
    atomic_write_text(os.path.join(tmp, METADATA), json.dumps(meta, indent=1))
    commit_directory(tmp, final)
    atomic_write_text(os.path.join(root, "latest"), f"{os.path.basename(final)}\n")
    if keep_last > 0:
        prune(root, keep_last)
    lora = getattr(trainer, "lora", None)
    if lora:
        _say_lora_size(final, meta, lora)


def _say_lora_size(directory: str, meta: dict, lora: dict) -> None:
    """The run log's line on a LoRA checkpoint: its size beside the frozen base it names."""
    size = sum(int(f["bytes"]) for f in meta["files"].values()) + os.path.getsize(os.path.join(directory, METADATA))
    per = 2 if meta["layout"]["precision"] in ("bf16", "fp16", "fp8") else 4
    print(f"mwb: LoRA checkpoint {directory}: {size / 2**20:.2f} MiB ({lora['trainable']:,} trainable parameters "
          f"with optimizer state); the frozen base it names holds {lora['frozen']:,} parameters "
          f"({lora['frozen'] * per / 2**20:.2f} MiB of weights) and is not copied", file=sys.stderr, flush=True)


def prune(root: str, keep_last: int, keep: Iterable[str] = ()) -> None:
    """Remove all but the newest ``keep_last`` ``step_N`` directories, never one named in ``keep`` (the
    best checkpoint of a fine-tuning run, which may be older than the newest)."""
    steps = sorted((int(n.split("_")[1]), n) for n in os.listdir(root)
                   if n.startswith("step_") and n.split("_")[1].isdigit())
    keep = set(keep)
    for _, name in steps[:-keep_last]:
        if name not in keep:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def write_model_checkpoint(directory: str, cfg, vocab_size: int, tensors: dict, step: int = 0,
                           extra_files: ExtraFiles = None, overwrite: bool = False) -> str:
    """A model-only, single-shard checkpoint from full (unpadded, global) tensors, without a trainer.

    Used by ``mwb convert`` and :func:`mwb.core.checkpoint.consolidate`-style tools; it loads into any
    layout like a training checkpoint, with fresh optimizer state.
    """
    from ..errors import CheckpointError
    directory = os.path.abspath(directory)
    tmp = staging_dir(directory, overwrite, CheckpointError)
    file = shard_name(0)
    index, data = {}, {}
    for name, t in sorted(tensors.items()):
        key = f"model/{name}"
        data[key] = t
        index[name] = {"shape": list(t.shape), "padded_shape": list(t.shape),
                       "dtype": str(t.dtype).replace("torch.", ""), "expert": False, "optim": [],
                       "chunks": [{"file": file, "key": key, "offsets": [0] * t.dim(), "shape": list(t.shape),
                                   "tp": None, "ep": None}]}
    size = write_safetensors(data, os.path.join(tmp, file))
    extra = _write_extra(tmp, extra_files)
    p = cfg.parallel
    meta = {"format": FORMAT, "step": step,
            "layout": {"world_size": 1, "tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "dp": 1, "sp": False,
                       "order": p.order, "distributed_optimizer": False, "precision": cfg.train.precision},
            "arch": cfg.model.arch, "vocab_size": vocab_size, "config": config_tree(cfg),
            "tokenizer": extra.get("tokenizer"), "extra_files": extra, "optimizer": None, "scaler": None,
            "files": {file: {"rank": 0, "coords": {"tp": 0, "pp": 0, "dp": 0, "cp": 0, "ep": 0, "edp": 0},
                             "bytes": size}},
            "rng": {}, "tensors": index}
    atomic_write_text(os.path.join(tmp, METADATA), json.dumps(meta, indent=1))
    commit_directory(tmp, directory)
    return directory
