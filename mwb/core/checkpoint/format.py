"""The on-disk format (``mwb-checkpoint-v2``): file names, metadata, and every check made before reading.

``step_N/metadata.json`` describes everything; ``step_N/shard_XXXXX.safetensors`` (one per rank that held
something to save) hold the tensors. See ``docs/checkpoint.md`` for the full description. The rules that
make the format safe to read:

* a file is read only through ``safetensors`` (no pickle), after its byte size was checked against the
  size recorded when it was written, so a truncated or missing shard is named before anything is loaded;
* the layout in the metadata must be a possible layout, name one file per rank with that rank's grid
  coordinates, and agree with the TP/EP split recorded on every tensor piece;
* the pieces of each tensor must tile its global shape exactly (no gaps, no overlaps, nothing outside).
Every violation is a :class:`CheckpointError` with one line naming the directory, file or tensor.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

import numpy as np
import torch

from ..atomic import commit_file, fsync_dir
from ..errors import CheckpointError
from .shards import coverage_error, volume

FORMAT = "mwb-checkpoint-v2"
METADATA = "metadata.json"
LAYOUT_KEYS = ("world_size", "tp", "pp", "vpp", "cp", "ep", "order")  # what fixes each rank's RNG streams


def shard_name(rank: int) -> str:
    return f"shard_{rank:05d}.safetensors"


# ---------------------------------------------------------------------------------------- atomic writes


def write_safetensors(tensors: dict, path: str) -> int:
    """Write ``tensors`` (each made contiguous and unshared) atomically; returns the file's byte size."""
    from safetensors.torch import save_file
    tmp = path + ".partial"
    save_file({k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}, tmp,
              metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # safetensors creates 0600 files; shards are as readable as metadata.json
    commit_file(tmp, path)
    return os.path.getsize(path)


def staging_dir(final: str, overwrite: bool, error: type, hint: str = "") -> str:
    """A fresh, empty ``.NAME.incomplete`` directory beside ``final`` to write into before
    :func:`commit_directory`; a non-empty ``final`` (or a file there) is refused unless ``overwrite``."""
    if os.path.exists(final) and (not os.path.isdir(final) or os.listdir(final)) and not overwrite:
        raise error(f"{final} exists and is not empty; choose another destination{hint}")
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(final)}.incomplete")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def commit_directory(tmp: str, final: str) -> None:
    """Make ``tmp`` visible as ``final`` in one rename (an older ``final`` is replaced)."""
    if os.path.exists(final):
        old = final + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(final)  # the rename itself reaches the disk (the files in it were fsynced as they were written)


# What a tokenizer named by its file keeps from beside it, because it changes what the tokenizer is: the
# special-token roles (tokenizer_config.json) and the chat template chat fine-tuning trained with.
TOKENIZER_SIBLINGS = ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def copy_extra(src, dst_dir: str, siblings: tuple[str, ...] = ()) -> str:
    """Copy a file, the regular files of a directory, or a list of files into ``dst_dir``; returns the
    path (relative to the checkpoint) a loader should use: the file itself, or the directory. A file brings the
    ``siblings`` found beside it (a tokenizer: :data:`TOKENIZER_SIBLINGS`)."""
    os.makedirs(dst_dir, exist_ok=True)
    base = os.path.basename(dst_dir)
    if isinstance(src, (list, tuple)):
        for f in src:
            shutil.copy2(f, os.path.join(dst_dir, os.path.basename(f)))
        return base
    src = str(src)
    if os.path.isdir(src):
        for name in sorted(os.listdir(src)):
            if os.path.isfile(os.path.join(src, name)):
                shutil.copy2(os.path.join(src, name), os.path.join(dst_dir, name))
        return base
    name = os.path.basename(src)
    for sib in siblings:
        if os.path.isfile(os.path.join(os.path.dirname(src), sib)) and sib != name:
            shutil.copy2(os.path.join(os.path.dirname(src), sib), os.path.join(dst_dir, sib))
    # A GPT-2 BPE tokenizer named by one of its two files needs the other one too.
    if name in ("vocab.json", "merges.txt"):
        for sib in ("vocab.json", "merges.txt"):
            if os.path.isfile(os.path.join(os.path.dirname(src), sib)):
                shutil.copy2(os.path.join(os.path.dirname(src), sib), os.path.join(dst_dir, sib))
    else:
        shutil.copy2(src, os.path.join(dst_dir, name))
    return f"{base}/{name}"


# ------------------------------------------------------------------------------------------- RNG state


def rng_split(state: dict) -> tuple[dict, dict]:
    """Every RNG stream as (tensors for safetensors, small JSON-able rest)."""
    tensors = {"rng/torch": state["torch"]}
    for name, t in state.get("tracker", {}).items():
        tensors[f"rng/tracker/{name}"] = t
    if "cuda" in state:
        tensors["rng/cuda"] = state["cuda"]
    name, keys, pos, has_gauss, cached = state["numpy"]
    tensors["rng/numpy_keys"] = torch.from_numpy(np.asarray(keys).astype(np.int64))
    version, internal, gauss = state["python"]
    tensors["rng/python"] = torch.tensor(list(internal), dtype=torch.int64)
    rest = {"python": [version, gauss], "numpy": [str(name), int(pos), int(has_gauss), float(cached)],
            "tracker": sorted(state.get("tracker", {})), "cuda": "cuda" in state}
    return tensors, rest


def rng_join(rest: dict, get) -> dict:
    """Inverse of :func:`rng_split`; ``get(key)`` reads a tensor of this rank's shard."""
    version, gauss = rest["python"]
    name, pos, has_gauss, cached = rest["numpy"]
    state = {"python": (version, tuple(int(x) for x in get("rng/python").tolist()), gauss),
             "numpy": (name, get("rng/numpy_keys").numpy().astype(np.uint32), pos, has_gauss, cached),
             "torch": get("rng/torch"),
             "tracker": {n: get(f"rng/tracker/{n}") for n in rest.get("tracker", [])}}
    if rest.get("cuda"):
        state["cuda"] = get("rng/cuda")
    return state


# -------------------------------------------------------------------------------------------- reading


def read_metadata(directory: str) -> dict:
    """The validated metadata of the checkpoint in ``directory`` (see the module docstring)."""
    path = os.path.join(directory, METADATA)
    if not os.path.isdir(directory):
        raise CheckpointError(f"checkpoint directory not found: {directory}")
    if not os.path.exists(path):
        legacy = [n for n in os.listdir(directory) if n.startswith("rank_") and n.endswith(".pt")]
        hint = " (an mwb-checkpoint-v1 directory, which this version cannot read)" if legacy else ""
        raise CheckpointError(f"{directory} has no {METADATA}: it is an incomplete checkpoint or not an mwb "
                              f"checkpoint{hint}")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the checkpoint is damaged") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise CheckpointError(f"{path}: unsupported checkpoint format {got!r} (this version reads {FORMAT})")
    validate(meta, directory)
    return meta


def _layout_error(directory: str, msg: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {directory}: wrong layout description in {METADATA}: {msg}")


def validate(meta: dict, directory: str) -> None:
    from ..parallel.dims import LayoutError, ParallelDims
    from ..parallel.state import _coords

    lay = meta.get("layout") or {}
    try:
        dims = ParallelDims(world_size=int(lay["world_size"]), tp=int(lay["tp"]), pp=int(lay["pp"]),
                            vpp=int(lay.get("vpp", 1)), cp=int(lay.get("cp", 1)), ep=int(lay.get("ep", 1)),
                            sp=bool(lay.get("sp", False)), order=lay.get("order", "tp-cp-ep-dp-pp"))
    except (KeyError, TypeError, ValueError, LayoutError) as e:
        raise _layout_error(directory, str(e).split("; choose")[0]) from None
    if int(lay.get("dp", dims.dp)) != dims.dp:
        raise _layout_error(directory, f"dp {lay.get('dp')} but world {dims.world_size} / (tp·pp·cp) = {dims.dp}")
    files = meta.get("files") or {}
    grid = _coords(dims)
    for name, info in files.items():
        r = info.get("rank")
        if not isinstance(r, int) or not 0 <= r < dims.world_size:
            raise _layout_error(directory, f"{name} belongs to rank {r}, outside world size {dims.world_size}")
        got = {k: info.get("coords", {}).get(k) for k in ("tp", "pp", "dp", "cp")}
        want = {k: grid[r][k] for k in got}
        if got != want:
            raise _layout_error(directory, f"{name} was written by rank {r} at {got}, but this layout puts rank "
                                           f"{r} at {want}")
    for name, info in files.items():  # presence and size, before anything is read
        path = os.path.join(directory, name)
        where = _where(info)
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint {directory} is missing shard {name} ({where}); restore the file "
                                  f"or name an earlier step_N in checkpoints/latest")
        size = os.path.getsize(path)
        if size != info.get("bytes"):
            raise CheckpointError(f"checkpoint shard {path} is truncated or damaged ({size} bytes, "
                                  f"{info.get('bytes')} written)")
    for tname, t in (meta.get("tensors") or {}).items():
        _validate_tensor(directory, tname, t, files, dims)


def _where(info: dict) -> str:
    c = info.get("coords", {})
    return f"rank {info.get('rank')}: tp {c.get('tp')} pp {c.get('pp')} dp {c.get('dp')}"


def _validate_tensor(directory: str, name: str, t: dict, files: dict, dims) -> None:
    padded = [int(s) for s in t.get("padded_shape", [])]
    for piece in t.get("chunks", []) + t.get("optim", []):
        if piece.get("file") not in files:
            raise CheckpointError(f"checkpoint {directory}: tensor {name} names file {piece.get('file')!r}, "
                                  f"which {METADATA} does not list")
        where = piece if "offsets" in piece else piece.get("local", {})
        tp, ep = where.get("tp"), where.get("ep")
        if tp is not None and tp.get("size") != dims.tp:
            raise _layout_error(directory, f"tensor {name} is split over tp {tp.get('size')}, layout says tp "
                                           f"{dims.tp}")
        if ep is not None and (ep[1] - ep[0]) * dims.ep != padded[0]:
            raise _layout_error(directory, f"tensor {name} holds experts {ep[0]}..{ep[1] - 1} of {padded[0]}, "
                                           f"which does not match ep {dims.ep}")
    err = coverage_error(padded, [(c["offsets"], c["shape"]) for c in t.get("chunks", [])])
    if err:
        raise CheckpointError(f"checkpoint {directory}: tensor {name} is incomplete or inconsistent ({err})")
    optim = t.get("optim", [])
    if optim:
        by_local: dict[tuple, list] = {}
        for piece in optim:
            loc = piece["local"]
            by_local.setdefault((tuple(loc["offsets"]), tuple(loc["shape"])), []).append(piece)
        err = coverage_error(padded, [(list(o), list(s)) for o, s in by_local])
        for (offsets, shape), pieces in by_local.items():
            have = sorted((p["lo"], p["hi"]) for p in pieces)
            end = 0
            for lo, hi in have:
                if lo != end:
                    err = err or f"optimizer state of shard {list(offsets)} lacks elements {end}..{lo - 1}"
                end = max(end, hi)
            if end != volume(shape):
                err = err or f"optimizer state of shard {list(offsets)} has {end} of {volume(shape)} elements"
        if err:
            raise CheckpointError(f"checkpoint {directory}: optimizer state of {name} is incomplete ({err})")


def describe_layout(lay: dict) -> str:
    return (f"world {lay.get('world_size')}: tp {lay.get('tp')} pp {lay.get('pp')} vpp {lay.get('vpp', 1)} "
            f"cp {lay.get('cp', 1)} ep {lay.get('ep', 1)} dp {lay.get('dp')}, sp {'on' if lay.get('sp') else 'off'}, "
            f"distributed optimizer {'on' if lay.get('distributed_optimizer') else 'off'}, "
            f"{lay.get('precision', 'fp32')}")


def same_grid(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in LAYOUT_KEYS)


def tokenizer_path(directory: str, meta: dict) -> Optional[str]:
    rel = meta.get("tokenizer")
    return os.path.join(directory, rel) if rel else None


MARKERS = ("best", "latest")  # files under OUT/checkpoints naming a step_N; a run means its best, else latest


def marked_dir(root: str, marker: str) -> Optional[str]:
    """The checkpoint directory that ``root/marker`` names (``OUT/checkpoints/latest`` or ``/best``), or None
    when there is no such marker; a CheckpointError when it names a step that does not exist."""
    path = os.path.join(root, marker)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        name = f.read().strip()
    d = os.path.join(root, name)
    if not name or not os.path.isdir(d):
        raise CheckpointError(f"{path} names '{name}', which does not exist under {root}; write an existing "
                              f"step_N into it")
    return d


def latest_dir(root: str) -> Optional[str]:
    """The newest complete checkpoint directory under ``root`` (``OUT/checkpoints``), or None."""
    return marked_dir(root, "latest")


def resume_dir(root: str) -> Optional[str]:
    """What ``--resume`` will load from ``root`` (``OUT/checkpoints``), checked completely (marker, metadata,
    every shard present with its written size) so that the launching process can fail before any rank
    starts; None when there is nothing to resume."""
    d = latest_dir(root)
    if d is not None:
        read_metadata(d)
    return d
