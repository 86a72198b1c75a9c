"""megatron-core ``--ckpt-format torch_dist`` checkpoints → mwb, on CPU without a process group.

A ``torch_dist`` checkpoint directory (``iter_NNNNNNN/`` or ``release/``, named by the save directory's
``latest_checkpointed_iteration.txt``) holds ``metadata.json`` (``{"sharded_backend": "torch_dist", …}``),
``common.pt`` (what is not sharded: ``args``, ``checkpoint_version``, ``iteration``) and a PyTorch
Distributed Checkpoint (``.metadata`` + ``__R_F.distcp`` files). Every model tensor is stored whole, in its
global TP-1 shape, under megatron-core's sharded key; decoder layers are stacked on a leading layer axis
(``decoder.layers.self_attention.linear_qkv.weight`` is ``[L, (np + 2·ng)·hn, h]``), whatever TP/PP/EP wrote
it (BERT's block is ``encoder.layers.*``, stacked the same way). So reading is: load the model's tensors with
``torch.distributed.checkpoint`` (``no_dist=True``: no process group), unstack the layer axis,
and hand the result to the same merge as the ``torch`` format, as one shard.

``common.pt`` holds the pickled ``args``: like the legacy reader it is read with ``weights_only=False``, for
trusted checkpoints only. ``_extra_state`` byte objects and optimizer state are not read.
"""
from __future__ import annotations

import json
import os
import re
from typing import Optional

import torch

from . import megatron_args, megatron_legacy, megatron_t5
from .hf_io import ConversionError

MODEL_PREFIXES = ("embedding.", "decoder.", "encoder.", "output_layer.", "lm_head.", "pooler.", "binary_head.")


def _dir(path: str) -> str:
    return megatron_legacy.checkpoint_dir(path) if os.path.isfile(os.path.join(path, megatron_legacy.TRACKER)) \
        else path


def is_dist(path: str) -> bool:
    """A ``torch_dist`` checkpoint directory, or a save directory whose tracker names one."""
    if not os.path.isdir(path):
        return False
    try:
        d = _dir(path)
    except ConversionError:
        return False
    meta = os.path.join(d, "metadata.json")
    if not os.path.isfile(meta):
        return False
    try:
        with open(meta, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("sharded_backend") == "torch_dist"


def load_tensors(d: str, prefix: str = "") -> dict:
    """{sharded key: full tensor} of the model tensors in the DCP checkpoint ``d``; ``prefix`` (NeMo's
    ``model.`` / ``module.``) is what the model's keys start with, and is taken off."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    try:
        reader = dcp.FileSystemReader(d)
        md = reader.read_metadata()
    except Exception as e:
        raise ConversionError(f"{d}: the distributed checkpoint's .metadata cannot be read ({type(e).__name__})") \
            from None
    want = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
            if isinstance(v, TensorStorageMetadata) and k.startswith(tuple(prefix + p for p in MODEL_PREFIXES))}
    if not want:
        raise ConversionError(f"{d}: the distributed checkpoint holds no model tensors")
    missing = sorted({i.relative_path for i in md.storage_data.values()
                      if not os.path.isfile(os.path.join(d, i.relative_path))})
    if missing:
        raise ConversionError(f"{d}: shard {', '.join(missing)} of the distributed checkpoint is missing")
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception
    try:
        dcp.load(want, storage_reader=reader, planner=dcp.DefaultLoadPlanner(allow_partial_load=True),
                 no_dist=True)
    except (Exception, CheckpointException) as e:
        raise ConversionError(f"{d}: the distributed checkpoint's shards cannot be read "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    return {k[len(prefix):]: v for k, v in want.items()}


def unstack(tensors: dict, layers, where: str) -> dict:
    """Stacked ``decoder.layers.X`` (``encoder.layers.X``) ``[L, …]`` → ``decoder.layers.N.X``; per-layer keys
    pass through. ``layers``: one count for every stack, or ``{"encoder": n, "decoder": m}`` (a T5 whose two
    stacks differ in depth)."""
    out = {}
    for k, v in tensors.items():
        m = re.match(r"^(decoder|encoder)\.layers\.(?!\d+\.)", k)
        if m:
            n = layers[m.group(1)] if isinstance(layers, dict) else layers
            if v.dim() == 0 or v.shape[0] != n:
                raise ConversionError(f"{where}: {k} stacks {v.shape[0] if v.dim() else 0} layers, args say "
                                      f"{n}")
            for i in range(n):
                out[f"{m.group(1)}.layers.{i}.{k[m.end():]}"] = v[i].clone()
        else:
            out[k] = v
    return out


def _common(d: str) -> dict:
    """``common.pt`` of the checkpoint directory ``d``: the trainer's dict with ``args``."""
    common_file = os.path.join(d, "common.pt")
    if not os.path.isfile(common_file):
        raise ConversionError(f"{d}: common.pt is missing (it holds the run's args)")
    common = megatron_legacy._load(common_file)
    if not isinstance(common, dict):
        raise ConversionError(f"{common_file} is not the trainer's common state (a dict with args)")
    return common


def read(path: str, vocab_size: Optional[int] = None) -> tuple:
    """(mwb model config, vocabulary size, {mwb name: full tensor}, args) of a ``torch_dist`` checkpoint."""
    d = _dir(os.path.abspath(path))
    common = _common(d)
    args = common.get("args")
    megatron_args.check_args(args, d)
    layers = megatron_legacy._arg(args, "num_layers", need=True, where=d) if args is not None else None
    if layers is None:
        raise ConversionError(f"{d}: common.pt has no 'args' (the architecture cannot be known)")
    version = megatron_args.check_version(common.get("checkpoint_version", 3.0), d, megatron_legacy.VERSIONS)
    counts = {side: megatron_t5.stack_depth(args, side, int(layers)) for side in ("encoder", "decoder")}
    state = unstack(load_tensors(d), counts, d)
    flat = megatron_legacy.core_tensors(state, d)
    return megatron_legacy.assemble(args, version, [[flat]], d, vocab_size)


def common_args(path: str):
    return _common(_dir(os.path.abspath(path))).get("args")
