"""NeMo checkpoint → mwb checkpoint: the step that picks a reader for an unpacked ``.nemo`` archive or NeMo 2
directory (GPT/BERT through :mod:`.nemo`'s Megatron mapping, MegatronT5Model through :mod:`.nemo_t5`) and writes
the result. Kept apart from :mod:`.nemo`, which holds the archive, config and tokenizer helpers both readers use,
so that neither reader imports the other."""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

from ..checkpoint.writer import write_model_checkpoint
from ..config import RunConfig, update
from . import megatron_args, megatron_dist, megatron_legacy, nemo, nemo_t5
from .hf_io import ConversionError
from .nemo import is_nemo  # noqa: F401  (the package's entry point names it here too)


def _read(src: str, root: str, tmp: str) -> tuple:
    """(model config, vocab size, tensors, tokenizer files) of the unpacked checkpoint ``root``."""
    if os.path.isfile(os.path.join(root, nemo.CONFIG)):
        cfg = nemo._yaml(os.path.join(root, nemo.CONFIG))
        if nemo_t5.is_t5(cfg):  # MegatronT5Model: its own names and config sections (nemo_t5)
            return nemo_t5.read(src, root, tmp, cfg)
        args, prefix = nemo.nemo1_args(cfg, src), "model."
        version = 3.0 if cfg.get("mcore_gpt") else 2.0  # NeMo's legacy GPT fuses QKV as [np, 3, hn]
        dist_dir = os.path.join(root, "model_weights")
        dist_dir = dist_dir if os.path.isdir(dist_dir) else None
        tok = cfg.get("tokenizer") or {}  # a mapping: nemo.nemo1_args checked it
        has = dist_dir or os.path.isfile(os.path.join(root, nemo.WEIGHTS)) or any(
            n.startswith(("mp_rank_", "tp_rank_")) for n in os.listdir(root))
        if not has:
            raise ConversionError(f"{src}: the checkpoint holds no weights (no {nemo.WEIGHTS}, mp_rank_*/, "
                                  f"tp_rank_*_pp_rank_*/ or model_weights/)")
    else:
        model_yaml = os.path.join(root, "context", "model.yaml")
        if not os.path.isfile(model_yaml):
            raise ConversionError(f"{src}: a NeMo 2 checkpoint needs context/model.yaml (io.json alone is not read)")
        top = nemo._yaml(model_yaml)
        cfg = top.get("config") if isinstance(top.get("config"), dict) else top
        args, prefix, version = nemo.nemo2_args(cfg, src), "module.", 3.0
        dist_dir = os.path.join(root, "weights")
        if not megatron_dist.is_dist(dist_dir):
            raise ConversionError(f"{src}: the checkpoint holds no weights (weights/ is not a torch_dist checkpoint)")
        tok = {}
        root = os.path.join(root, "context")
    megatron_args.check_args(args, src)  # before nemo._weights computes with the layout
    stages = nemo._weights(root, args, version, dist_dir, prefix)
    files, lower = nemo.find_tokenizer(root, tok)
    paths, size = nemo._stage(files, lower, tmp)
    m, vocab, tensors, _ = megatron_legacy.assemble(args, version, stages, src, size)
    return m, vocab, tensors, paths


def nemo_to_mwb(src: str, dst: str, overwrite: bool = False) -> tuple[str, str]:
    """NeMo 1 ``.nemo`` / NeMo 2 directory → mwb checkpoint directory; returns (dst, family name)."""
    src = os.path.abspath(src)
    with tempfile.TemporaryDirectory(prefix="mwb-nemo-") as tmp:
        root = src
        if os.path.isfile(src):
            root = os.path.join(tmp, "unpacked")
            nemo._unpack(src, root)
        tok_dir = os.path.join(tmp, "tokenizer")
        os.makedirs(tok_dir)
        m, vocab, tensors, paths = _read(src, root, tok_dir)
        cfg = update(RunConfig(), {"model": m})
        megatron_args.check_shapes(cfg.model, vocab, tensors, src)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=None))
        extra = {"tokenizer": paths} if paths else {}
        write_model_checkpoint(dst, cfg, vocab, tensors, extra_files=extra, overwrite=overwrite)
    return os.path.abspath(dst), f"nemo-{m['arch']}"
