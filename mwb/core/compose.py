"""Build and load models: the one place that puts plain models, parallel plans and checkpoints together.

Layers below know nothing of each other's business: :mod:`.models` holds single-device modules,
:mod:`.parallel` the plans that shard them, :mod:`.checkpoint` the on-disk format and :mod:`.convert` the
Hugging Face mapping. This module composes them:

* :func:`build_model` — the model (or pipeline stage) for this rank: plain module on the meta device →
  tensor/sequence, context and expert plans → real storage (:func:`materialize`) → layout-independent
  initialisation. Building on the meta device first means no rank ever allocates the unsharded model.
* :func:`full_state` / :func:`load_full_model` — one process, whole model, from any way a user names one:
  a run directory, its ``checkpoints`` directory, a ``step_N`` directory, a consolidated ``.safetensors``
  file or a Hugging Face model directory (``config.json``; converted on the fly). A LoRA run's checkpoint
  holds only its adapters (and what else trained) and names its base: the base is read and the adapters
  merged into it, so serving, generation, evaluation and conversion see an ordinary model.
* :func:`export_lora` — a LoRA run as a merged Hugging Face model or as a PEFT adapter directory.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from .checkpoint.consolidate import lora_metadata, mwb_state, write_consolidated
from .checkpoint.reader import copy_full_tensors
from .checkpoint.shards import canonical, unpadded_shape
from .config import ConfigError, LoRAConfig, ModelConfig, RunConfig
from .convert import ConversionError, family_for_mwb, is_hf_dir, load_hf, model_dict, state_to_hf
from .convert.peft import write_peft_dir
from .errors import CheckpointError, MwbError
from .models.arch import make_model
from .models.init import initialize
from .models.transformer import padded_vocab_size
from .named_models import local_checkpoint
from .parallel.context import parallelize_context
from .parallel.expert import parallelize_experts
from .parallel.lora import is_adapter, merge_adapters
from .parallel.state import single_process_state
from .parallel.tensor_parallel import parallelize_tensor


@torch.no_grad()
def materialize(model: nn.Module, device, dtype: Optional[torch.dtype] = None) -> nn.Module:
    """Replace meta parameters/buffers by real (uninitialised) ones, keeping ties and attributes."""
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in made:
                want = dtype if (dtype is not None and p.is_floating_point()) else p.dtype
                new = nn.Parameter(torch.empty(p.shape, device=device, dtype=want), requires_grad=p.requires_grad)
                new.__dict__.update(p.__dict__)
                made[id(p)] = new
            module._parameters[key] = made[id(p)]
        for key, b in list(module._buffers.items()):
            if b is not None and b.device.type == "meta":
                module._buffers[key] = torch.zeros(b.shape, device=device, dtype=b.dtype)
    return model


def construct_sharded(make: Callable[[], nn.Module], cfg: ModelConfig, state, device,
                      dtype: Optional[torch.dtype] = None) -> nn.Module:
    """``make()`` on the meta device, parallelised for this rank (tensor/sequence, context and expert
    plans), then given real, uninitialised storage: the caller initialises it (:func:`initialize`)."""
    with torch.device("meta"):
        model = make()
    parallelize_tensor(model, state)
    if state.cp_size > 1:
        parallelize_context(model, state)
    if cfg.num_experts:
        parallelize_experts(model, state)
    return materialize(model, device, dtype)


def build_model(cfg: ModelConfig, state, vocab_size: int, seed: int, device="cpu",
                dtype: Optional[torch.dtype] = None, layer_ids: Optional[Sequence[int]] = None,
                pre_process: bool = True, post_process: bool = True) -> nn.Module:
    """The model (or pipeline stage) for this rank, initialised identically to the single-process model."""
    padded = padded_vocab_size(vocab_size, cfg.make_vocab_size_divisible_by, state.tp_size)
    model = construct_sharded(lambda: make_model(cfg, vocab_size, padded, layer_ids, pre_process, post_process),
                              cfg, state, device, dtype)
    initialize(model, seed, cfg.init_std, cfg.num_layers, cfg.tie_embeddings, real_vocab=vocab_size)
    return model


def full_state(path: str) -> tuple[RunConfig, int, dict, Optional[str]]:
    """(config, vocab size, {name: unpadded global tensor}, tokenizer path or None) for any ``path``: an mwb
    checkpoint in any form, a consolidated file, a Hugging Face directory (converted on the fly) or a model
    name (``smollm2-135m``, ``hf:ORG/NAME``; :mod:`mwb.core.named_models`)."""
    path = os.path.abspath(os.path.expanduser(str(local_checkpoint(path))))
    if is_hf_dir(path):
        return load_hf(path)
    cfg, vocab, tensors, tok = mwb_state(path)
    if not cfg.lora.rank:
        return cfg, vocab, tensors, tok
    base, base_tok = lora_base(path, cfg, vocab)
    try:
        merged = merge_adapters({**base, **tensors}, cfg.lora.scale)
    except KeyError as e:
        raise CheckpointError(f"{path}: a LoRA adapter's base weight {e.args[0]} is not in its base model") from None
    return replace(cfg, lora=LoRAConfig()), vocab, merged, tok or base_tok


def check_tokenizer_fits(vocab: int, tokenizer_vocab: int, checkpoint: str, tokenizer: str) -> None:
    """Refuse a tokenizer with more ids than the model's true vocabulary, in one line. The ids past it have
    no row of their own: one process fails with an ``IndexError`` in the embedding, while under TP they fall
    silently into padded rows (a zero embedding, a loss that can never predict them) — so the loss of a
    layout would depend on its padding."""
    if tokenizer_vocab > vocab:
        raise ConfigError(f"the tokenizer {tokenizer} has {tokenizer_vocab:,} ids but the model {checkpoint} has "
                          f"a vocabulary of {vocab:,}: pass its own tokenizer (--tokenizer)")


# the dtype a run builds its (frozen) base in, by train.precision
_BASE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}


def lora_base(path: str, cfg: RunConfig, vocab: int) -> tuple[dict, Optional[str]]:
    """({name in the run's model: global tensor}, tokenizer) of the base a LoRA run at ``path`` adapts: the
    checkpoint it names (any form :func:`full_state` reads, itself possibly a LoRA run), placed at each
    prefix where the run's model holds it, or the seeded initialisation of ``cfg.model`` when it names none
    (``mwb pretrain --lora``)."""
    info = lora_metadata(path) or {}
    base = info.get("base")
    if base is None:
        model = build_model(cfg.model, single_process_state(), vocab, cfg.train.seed,
                            dtype=_BASE_DTYPES.get(cfg.train.precision))
        tensors = {}
        for name, p in model.named_parameters():
            canon = canonical(name, cfg.model.tie_embeddings)
            shape = unpadded_shape(canon, p, vocab)
            tensors.setdefault(canon, p.detach()[tuple(slice(0, n) for n in shape)].clone())
        return tensors, None
    try:
        _, base_vocab, tensors, tok = full_state(base)
    except MwbError as e:
        raise CheckpointError(f"{path} is a LoRA run on the base {base}, which cannot be read: {e}") from None
    if base_vocab != vocab:
        raise CheckpointError(f"{path} is a LoRA run with vocabulary size {vocab}, but its base {base} has "
                              f"{base_vocab}")
    out = {}
    for prefix in info.get("prefixes") or [""]:
        out.update({prefix + k: v for k, v in tensors.items()})
    return out, tok


def export_lora(src: str, dst: str, peft: bool = False, overwrite: bool = False) -> tuple[str, str]:
    """A LoRA run → a Hugging Face directory with the adapters merged (default) or, with ``peft``, a PEFT
    adapter directory for the base's Hugging Face export; returns (dst, family)."""
    src = os.path.abspath(os.path.expanduser(str(local_checkpoint(src))))
    if is_hf_dir(src):
        raise ConversionError(f"{src} is a Hugging Face model, not a LoRA run")
    cfg, vocab, own, tok = mwb_state(src)
    if not cfg.lora.rank:
        raise ConversionError(f"{src} is not a LoRA run (it has no adapters): `mwb convert {src} OUT` exports it")
    info = lora_metadata(src) or {}
    if not peft:
        merged_cfg, vocab, merged, tok = full_state(src)
        return state_to_hf(merged_cfg, vocab, merged, tok, dst, info.get("base") or src, overwrite)
    family = family_for_mwb(model_dict(cfg))
    others = sorted(k for k in own if not is_adapter(k))
    if others or (info.get("prefixes") or [""]) != [""]:
        what = ", ".join(others[:3]) or "adapters inside a task model"
        raise ConversionError(f"{src} trained more than adapters on a language model ({what}); a PEFT adapter "
                              f"directory holds adapters only: use --merge")
    return write_peft_dir(dst, family.NAME, own, cfg.lora, info.get("base"), overwrite), family.NAME


def build_full_model(cfg: RunConfig, vocab: int, tensors: dict, device="cpu",
                     source: str = "checkpoint") -> nn.Module:
    """A single-process model of ``cfg.model`` holding ``tensors`` (global, unpadded), in eval mode."""
    model = build_model(cfg.model, single_process_state(), vocab, cfg.train.seed)

    def get(name):
        if name not in tensors:
            raise CheckpointError(f"{source} has no tensor {name} (its model settings differ)")
        return tensors[name]
    copy_full_tensors([model], get, vocab, cfg.model.tie_embeddings, source=source)
    return model.to(device).eval()


def load_full_model(path: str, device="cpu") -> tuple[RunConfig, nn.Module, Optional[str]]:
    """(run config, single-process model in eval mode, tokenizer path or None) from any checkpoint path.

    ``cfg.model.vocab_size`` is the real vocabulary size and ``cfg.data.tokenizer`` the stored tokenizer.
    """
    cfg, vocab, tensors, tok = full_state(path)
    model = build_full_model(cfg, vocab, tensors, device, source=str(path))
    return cfg, model, tok


def consolidate(src_ckpt: str, dst_file: str) -> str:
    """Write the full model of ``src_ckpt`` (any path :func:`load_full_model` takes) as one safetensors
    file with the config and vocabulary size in its header; returns ``dst_file``."""
    cfg, vocab, tensors, _ = full_state(src_ckpt)
    return write_consolidated(dst_file, cfg, vocab, tensors)
