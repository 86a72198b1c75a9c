"""Reading checkpoints into any layout: model weights, optimizer state, loss scaler, step and RNG streams.

For every parameter of the new layout, the saved pieces of that parameter (from any number of shard files)
are placed into its unpadded global tensor, padded for the new layout's vocabulary, and this rank's slice is
cut with the initialiser's own ``shard_of`` (:mod:`.shards`). Optimizer state goes the same way: the saved
element ranges of each old local shard rebuild that shard, the shards rebuild the global tensor, and the new
piece ``[lo, hi)`` of the new local shard is cut from it. Only one global parameter is held at a time.

RNG streams: with the same rank grid (world size, tp, pp, vpp, cp, ep, order) every rank gets back exactly
its own streams, so a resumed run is bit-identical to an uninterrupted one. Another grid has other streams
by construction (they are seeded per TP/PP rank), so they are re-derived from (seed, step, TP/PP rank):
reproducible, but dropout masks differ from the uninterrupted run (with dropout 0 nothing changes).
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import torch

from ..errors import CheckpointError
from ..parallel.fsdp import assign
from ..parallel.random import restore_rng_state, seed_everything
from .format import read_metadata, rng_join, same_grid, shard_name
from .shards import assemble, canonical, local_slice, unpadded_shape
from .writer import layout_of, named_parameters

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8,
          "bool": torch.bool}


class Checkpoint:
    """A validated checkpoint directory whose shard files are opened (read-only, safetensors) on demand."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.meta = read_metadata(self.directory)
        self.tensors: dict = self.meta.get("tensors") or {}
        self._open: dict = {}

    # ------------------------------------------------------------------------------------ raw access
    def _file(self, name: str):
        if name not in self._open:
            from safetensors import safe_open
            path = os.path.join(self.directory, name)
            try:
                self._open[name] = safe_open(path, framework="pt")
            except Exception as e:  # SafetensorError, OSError
                raise CheckpointError(f"checkpoint shard {path} cannot be read ({type(e).__name__}: {e})") from None
        return self._open[name]

    def read(self, file: str, key: str) -> torch.Tensor:
        try:
            return self._file(file).get_tensor(key)
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"checkpoint shard {os.path.join(self.directory, file)} has no readable tensor "
                                  f"{key} ({type(e).__name__}: {e})") from None

    @property
    def step(self) -> int:
        return int(self.meta.get("step", 0))

    @property
    def has_optimizer_state(self) -> bool:
        return any(t.get("optim") for t in self.tensors.values())

    def _entry(self, name: str) -> dict:
        if name not in self.tensors:
            raise CheckpointError(f"checkpoint {self.directory} has no tensor {name}; it was saved from another "
                                  f"model (check model.* settings against its config)")
        return self.tensors[name]

    # ---------------------------------------------------------------------------------- global tensors
    def model_tensor(self, name: str) -> torch.Tensor:
        """The unpadded global tensor ``name`` (saved dtype)."""
        t = self._entry(name)
        parts = [(c["offsets"], self.read(c["file"], c["key"])) for c in t["chunks"]]
        return assemble(t["padded_shape"], t["shape"], parts, DTYPES.get(t["dtype"], torch.float32))

    def optimizer_state(self, name: str) -> tuple[dict[str, torch.Tensor], dict]:
        """({kind: unpadded global fp32 tensor} for master and element-wise states, {scalar: (value, dtype)})."""
        t = self._entry(name)
        if not t.get("optim"):
            raise CheckpointError(f"checkpoint {self.directory} has no optimizer state for {name}")
        kinds = set(t["optim"][0]["keys"])
        by_local: dict[tuple, list] = {}
        for piece in t["optim"]:
            if set(piece["keys"]) != kinds:
                raise CheckpointError(f"checkpoint {self.directory}: optimizer pieces of {name} hold different "
                                      f"states ({sorted(kinds)} vs {sorted(piece['keys'])})")
            by_local.setdefault(tuple(piece["local"]["offsets"]), []).append(piece)
        out = {}
        for kind in sorted(kinds):
            parts = []
            for offsets, pieces in by_local.items():
                shape = pieces[0]["local"]["shape"]
                flat = torch.empty(int(torch.Size(shape).numel()), dtype=torch.float32)
                for pc in pieces:
                    flat[pc["lo"]:pc["hi"]] = self.read(pc["file"], pc["keys"][kind]).float().view(-1)
                parts.append((list(offsets), flat.view(shape)))
            out[kind] = assemble(t["padded_shape"], t["shape"], parts, torch.float32)
        return out, t["optim"][0].get("scalars", {})

    def rng_state(self, rank: int) -> Optional[dict]:
        rest = (self.meta.get("rng") or {}).get(str(rank))
        if rest is None:
            return None
        file = shard_name(rank)
        return rng_join(rest, lambda key: self.read(file, key))


# ---------------------------------------------------------------------------------------------- model


def copy_full_tensors(chunks, get: Callable[[str], torch.Tensor], vocab: Optional[int], tied: bool,
                      source: str = "checkpoint", skip_frozen_base: bool = False) -> None:
    """Fill every parameter (and persistent buffer) of ``chunks`` from global tensors ``get(name)``;
    ``skip_frozen_base``: leave a LoRA run's frozen base parameters as they are (its checkpoints hold only
    what trains)."""
    with torch.no_grad():
        for chunk in chunks:
            for name, p in chunk.named_parameters():
                if skip_frozen_base and getattr(p, "lora_frozen", False):
                    continue
                canon = canonical(name, tied)
                full = get(canon)
                want = unpadded_shape(canon, p, vocab)
                if tuple(full.shape) != want:
                    raise CheckpointError(f"{source}: {canon} has shape {list(full.shape)}, this model needs "
                                          f"{list(want)} (the model settings differ from the checkpoint's)")
                assign(p, local_slice(full, p))  # (an --fsdp parameter keeps its DP shard of it)
            params = {n for n, _ in chunk.named_parameters(remove_duplicate=False)}
            for name, b in chunk.named_buffers():
                if name in params or name not in chunk.state_dict():
                    continue
                b.copy_(get(name))


def check_model(ck: Checkpoint, trainer) -> None:
    meta, cfg = ck.meta, trainer.cfg
    if meta.get("arch") != cfg.model.arch:
        raise CheckpointError(f"checkpoint {ck.directory} holds a '{meta.get('arch')}' model, this run is "
                              f"'{cfg.model.arch}'")
    if int(meta.get("vocab_size", -1)) != int(trainer.spec.vocab_size):
        raise CheckpointError(f"checkpoint {ck.directory} has vocabulary size {meta.get('vocab_size')}, this run "
                              f"{trainer.spec.vocab_size} (use the checkpoint's tokenizer)")


def _refresh_masters(opt) -> None:
    """fp32 masters that are copies (bf16/fp16 models) follow freshly loaded weights."""
    if getattr(opt, "fsdp", False):  # the sharded fp32 parameters are the masters
        return
    for pc in opt.pieces:
        if not pc.alias:
            pc.master.copy_(pc.param.data.view(-1)[pc.lo:pc.hi].float())


def _load_optimizer(ck: Checkpoint, trainer) -> None:
    opt, tied = trainer.optimizer, trainer.cfg.model.tie_embeddings
    saved = (ck.meta.get("optimizer") or {}).get("name")
    if saved and saved != trainer.cfg.optim.name:
        raise CheckpointError(f"checkpoint {ck.directory} holds {saved} state, this run uses optimizer "
                              f"'{trainer.cfg.optim.name}'; set optim.name={saved} or load the weights only")
    if getattr(opt, "fsdp", False):
        _load_fsdp_optimizer(ck, trainer)
        return
    params = named_parameters(trainer.chunks)
    cached_name, cached = None, None
    with torch.no_grad():
        for pc in opt.pieces:
            name, p = params[id(pc.param)]
            canon = canonical(name, tied)
            if canon != cached_name:
                cached_name, cached = canon, ck.optimizer_state(canon)
            states, scalars = cached
            new_state = {}
            for kind, full in states.items():
                piece = local_slice(full, p).reshape(-1)[pc.lo:pc.hi]
                if kind == "master":
                    pc.master.copy_(piece)
                    if not pc.alias:
                        pc.param.data.view(-1)[pc.lo:pc.hi].copy_(pc.master)
                else:
                    new_state[kind] = piece.to(pc.master.device, copy=True)
            for kind, s in scalars.items():
                dtype = DTYPES.get(s.get("dtype") or "")
                new_state[kind] = torch.tensor(s["value"], dtype=dtype) if dtype is not None else s["value"]
            opt.load_piece_state(pc, new_state)
    opt.found_inf_steps = int((ck.meta.get("optimizer") or {}).get("found_inf_steps", 0))


def _load_fsdp_optimizer(ck: Checkpoint, trainer) -> None:
    """--fsdp: each parameter's whole (TP-local) master and moments, cut to this rank's DP shard."""
    tied = trainer.cfg.model.tie_embeddings

    def state_of(name, p):
        states, scalars = ck.optimizer_state(canonical(name, tied))
        local = {kind: local_slice(full, p) for kind, full in states.items()}
        values = {}
        for kind, s in scalars.items():
            dtype = DTYPES.get(s.get("dtype") or "")
            values[kind] = torch.tensor(s["value"], dtype=dtype) if dtype is not None else s["value"]
        return local, values
    trainer.optimizer.load_whole(state_of)
    trainer.optimizer.found_inf_steps = int((ck.meta.get("optimizer") or {}).get("found_inf_steps", 0))


def load(trainer, directory: str, model_only: bool = False) -> int:
    """Restore a trainer of any layout from ``directory``; returns the step to continue from.

    Restores model weights, optimizer state (masters and moments), loss scaler, step and RNG streams (see
    the module docstring). ``model_only`` (fine-tuning) loads the weights alone and returns step 0; a
    checkpoint without optimizer state (e.g. converted from Hugging Face) does the same at its step.
    """
    ck = Checkpoint(directory)
    check_model(ck, trainer)
    cfg = trainer.cfg
    if ("lora" in ck.meta) != bool(getattr(trainer, "lora", None)):
        have = "holds LoRA adapters only" if "lora" in ck.meta else "holds a full model, no LoRA adapters"
        rank = ((ck.meta.get("config") or {}).get("lora") or {}).get("rank", 0)
        raise CheckpointError(f"checkpoint {ck.directory} {have}; continue it with the LoRA settings it was saved "
                              f"with (lora.* in its config: --lora {rank})")
    copy_full_tensors(trainer.chunks, ck.model_tensor, trainer.spec.vocab_size, cfg.model.tie_embeddings,
                      source=f"checkpoint {ck.directory}", skip_frozen_base="lora" in ck.meta)
    if model_only or not ck.has_optimizer_state:
        _refresh_masters(trainer.optimizer)
        trainer.step = 0 if model_only else ck.step
        trainer.consumed_samples = _consumed(ck, trainer) if trainer.step else 0
        return trainer.step
    _load_optimizer(ck, trainer)
    if ck.meta.get("scaler"):
        trainer.scaler.load_state_dict(ck.meta["scaler"])
    st = trainer.state
    rng = ck.rng_state(st.rank) if same_grid(ck.meta["layout"], layout_of(trainer)) else None
    if rng is not None:
        restore_rng_state(rng)
    else:
        seed_everything(cfg.train.seed + ck.step, st.tp_rank, st.pp_rank, trainer.device.type)
    trainer.step = ck.step
    trainer.consumed_samples = _consumed(ck, trainer)
    return trainer.step


def _consumed(ck: Checkpoint, trainer) -> int:
    """Training samples consumed before the checkpoint (written since batch-size ramp-up; before, every
    step consumed one global batch)."""
    saved = ck.meta.get("consumed_samples")
    return int(saved) if saved is not None else ck.step * int((ck.meta.get("config") or {}).get(
        "train", {}).get("global_batch_size", trainer.cfg.train.global_batch_size))
