"""A LoRA run's adapters as a Hugging Face PEFT adapter directory (``adapter_config.json`` +
``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained`` loads on the base's Hugging Face export.

PEFT names an adapter by the module it wraps in the Hugging Face model, under ``base_model.model.``, and
stores ``lora_A.weight [r, in]`` and ``lora_B.weight [out, r]`` exactly as mwb keeps them; its scale is
``lora_alpha / r`` as mwb's. Two families:

* Llama: one module per mwb layer (q/k/v/o, gate/up/down), names mapped as the weights are (:mod:`.llama`).
* GPT-2: q, k and v are one fused ``c_attn`` (a ``Conv1D``, hence ``fan_in_fan_out``). Three rank-r adapters
  on its three output blocks are one rank-3r adapter on the whole: ``A = [A_q; A_k; A_v]`` and ``B`` block-
  diagonal, since ``B·A·x`` then stacks the three outputs. ``rank_pattern``/``alpha_pattern`` give
  ``c_attn`` rank 3r and alpha 3α, which keeps the scale α/r. The other layers map one to one.
"""
from __future__ import annotations

import json
import os

import torch

from ..atomic import atomic_write_text
from ..checkpoint.format import commit_directory, staging_dir, write_safetensors
from . import gpt2, llama
from .hf_io import ConversionError

PREFIX = "base_model.model."
_LLAMA = {mwb: hf for hf, mwb in llama._LAYER.items() if "layernorm" not in hf}
_GPT2 = {"attn.o_proj": "attn.c_proj", "mlp.up_proj": "mlp.c_fc", "mlp.down_proj": "mlp.c_proj"}
_QKV = ("attn.q_proj", "attn.k_proj", "attn.v_proj")


def _split(name: str) -> tuple[int, str]:
    """``layers.3.attn.q_proj`` → (3, ``attn.q_proj``)."""
    parts = name.split(".")
    if parts[0] != "layers" or not parts[1].isdigit():
        raise ConversionError(f"adapter {name} is not on a transformer layer")
    return int(parts[1]), ".".join(parts[2:])


def _pairs(adapters: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{module: (A, B)}`` from mwb's ``module.lora_A`` / ``module.lora_B`` tensors."""
    out = {}
    for key, a in adapters.items():
        if key.endswith(".lora_A"):
            module = key[: -len(".lora_A")]
            out[module] = (a, adapters[module + ".lora_B"])
    return out


def peft_tensors(family: str, adapters: dict, rank: int, alpha: float) -> tuple[dict, list, dict, dict]:
    """(PEFT tensors, target module names, rank_pattern, alpha_pattern) for a ``family`` (``llama`` or
    ``gpt2``) model's mwb adapters."""
    tensors, targets = {}, []

    def put(module: str, a: torch.Tensor, b: torch.Tensor) -> None:
        tensors[f"{PREFIX}{module}.lora_A.weight"] = a.contiguous()
        tensors[f"{PREFIX}{module}.lora_B.weight"] = b.contiguous()
        targets.append(module)

    pairs = _pairs(adapters)
    if family == llama.NAME:
        for module, (a, b) in pairs.items():
            i, local = _split(module)
            put(f"model.layers.{i}.{_LLAMA[local]}", a, b)
        return tensors, sorted(targets), {}, {}
    if family != gpt2.NAME:
        raise ConversionError(f"PEFT export covers Llama and GPT-2 models, not {family}; use --merge")
    fused = {}
    for module, (a, b) in pairs.items():
        i, local = _split(module)
        if local in _QKV:
            fused.setdefault(i, {})[local] = (a, b)
        else:
            put(f"transformer.h.{i}.{_GPT2[local]}", a, b)
    for i, parts in sorted(fused.items()):
        if set(parts) != set(_QKV):
            raise ConversionError(f"layer {i} has adapters on {sorted(parts)} only; GPT-2's fused c_attn needs "
                                  f"q, k and v together")
        a = torch.cat([parts[n][0] for n in _QKV])
        b = torch.block_diag(*[parts[n][1] for n in _QKV])
        put(f"transformer.h.{i}.attn.c_attn", a, b)
    patterns = ({"c_attn": 3 * rank}, {"c_attn": 3 * alpha}) if fused else ({}, {})
    return tensors, sorted(targets), *patterns


def write_peft_dir(dst: str, family: str, adapters: dict, lora_cfg, base: str | None,
                   overwrite: bool = False) -> str:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` to ``dst`` (atomically)."""
    alpha = float(lora_cfg.alpha if lora_cfg.alpha is not None else lora_cfg.rank)
    tensors, targets, rank_pattern, alpha_pattern = peft_tensors(family, adapters, lora_cfg.rank, alpha)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
              "r": lora_cfg.rank, "lora_alpha": alpha, "lora_dropout": lora_cfg.dropout,
              "target_modules": targets, "rank_pattern": rank_pattern, "alpha_pattern": alpha_pattern,
              "fan_in_fan_out": family == gpt2.NAME, "bias": "none", "modules_to_save": None,
              "inference_mode": True, "init_lora_weights": True, "use_rslora": False, "use_dora": False}
    dst = os.path.abspath(dst)
    tmp = staging_dir(dst, overwrite, ConversionError, " (or --force)")
    write_safetensors(tensors, os.path.join(tmp, "adapter_model.safetensors"))
    atomic_write_text(os.path.join(tmp, "adapter_config.json"), json.dumps(config, indent=2, sort_keys=True) + "\n")
    commit_directory(tmp, dst)
    return dst
