"""Megatron-LM legacy T5 shards (``mp_rank_TT/model_optim_rng.pt``) → megatron-core T5 names, merged by :mod:`.megatron_t5`.

Why a renaming and not a reader of its own: a legacy T5 shard holds the same tensors as a megatron-core
``T5Model`` shard, split over TP the same way, only named and (before ``checkpoint_version`` 2) ordered
differently. Renaming each shard to megatron-core's names, with its fused rows put in megatron-core's
``[np, parts, hn]`` order, lets :func:`.megatron_t5.assemble` do the merge, the vocabulary trimming and the
config for both formats.

The names, from Megatron-LM's ``megatron/legacy/model/t5_model.py``, ``language_model.py`` and
``transformer.py`` (at the parent of commit 81b8b5acc0, "remove t5 legacy code"; the same since
``megatron/model/t5_model.py`` of 48a5e0daeb, 2021): ``model`` → ``language_model`` → ``embedding``
(``word_embeddings``, ``position_embeddings``; one embedding serves encoder and decoder), ``encoder`` and
``decoder`` (each a ``ParallelTransformer``: ``layers.N.*`` and ``final_layernorm``, called ``final_norm`` in
later versions, as ``input_layernorm``/``post_attention_layernorm`` became ``input_norm``/
``post_attention_norm``), and ``model`` → ``lm_head`` → ``bias`` (``T5LMHead``: the logits are the decoder
output times the word embedding plus this vocab-parallel bias; the head is always tied, no rescaling). A
decoder layer runs ``input_layernorm`` → ``self_attention`` → ``post_attention_layernorm`` →
``inter_attention`` (``query``, ``key_value``, ``dense``) → ``post_inter_attention_layernorm`` → ``mlp``: so
its ``post_attention_layernorm`` is megatron-core's ``pre_cross_attn_layernorm`` and its
``post_inter_attention_layernorm`` the ``pre_mlp_layernorm``, while an encoder layer's
``post_attention_layernorm`` is its ``pre_mlp_layernorm``. ``key_value`` rows follow ``checkpoint_version``
like ``query_key_value``'s (``fix_query_key_value_ordering`` in ``megatron/training/checkpointing.py``):
0 ``[2, np, hn]``, 1.0 ``[np, hn, 2]``, ≥ 2.0 ``[np, 2, hn]``.

Pipeline stages (``pipeline_model_parallel_split_rank``: encoder stages, then decoder stages, each with its
own embedding) are refused.
"""
from __future__ import annotations

import torch

from . import megatron_rows
from .hf_io import ConversionError

_NORMS = {"input_layernorm": "input_layernorm", "input_norm": "input_layernorm",
          "post_attention_layernorm": "post_attention", "post_attention_norm": "post_attention",
          "post_inter_attention_layernorm": "pre_mlp_layernorm", "post_inter_attention_norm": "pre_mlp_layernorm"}
# legacy linear → (megatron-core linear, rows fused per head: 3 for QKV, 2 for the cross K/V, 0 for none)
_LINEARS = {"self_attention.query_key_value": ("self_attention.linear_qkv", 3),
            "self_attention.dense": ("self_attention.linear_proj", 0),
            "inter_attention.query": ("cross_attention.linear_q", 0),
            "inter_attention.key_value": ("cross_attention.linear_kv", 2),
            "inter_attention.dense": ("cross_attention.linear_proj", 0),
            "mlp.dense_h_to_4h": ("mlp.linear_fc1", 0), "mlp.dense_4h_to_h": ("mlp.linear_fc2", 0)}
_MODEL_KEYS = ("language_model", "lm_head", "word_embeddings_for_head")


def is_t5(model: dict) -> bool:
    """Whether a legacy ``model`` dict is a T5's: its language model has a decoder."""
    language_model = model.get("language_model")
    return isinstance(language_model, dict) and "decoder" in language_model


def _to_core_rows(t: torch.Tensor, version: float, heads: int, parts: int, where: str) -> torch.Tensor:
    """A shard's fused rows in ``version``'s order → megatron-core's ``[np, parts, hn]``."""
    pieces = megatron_rows._split_qkv(t, version, heads, where, parts=parts)
    rest = t.shape[1:]
    return torch.stack([p.view(heads, -1, *rest) for p in pieces], dim=1).reshape(t.shape)


def _layer_name(side: str, kind: str, where: str) -> tuple:
    """(megatron-core name after ``{side}.layers.N.``, fused parts) of a legacy layer tensor."""
    base, s = kind.rsplit(".", 1) if "." in kind else (kind, "")
    if base in _NORMS and s in ("weight", "bias"):
        name = _NORMS[base]
        if name == "post_attention":
            name = "pre_cross_attn_layernorm" if side == "decoder" else "pre_mlp_layernorm"
        elif name == "pre_mlp_layernorm" and side == "encoder":
            name = ""
        if name:
            return f"{name}.{s}", 0
    if base in _LINEARS and s in ("weight", "bias") and (side == "decoder" or not base.startswith("inter_")):
        core, parts = _LINEARS[base]
        return f"{core}.{s}", parts
    raise ConversionError(f"{where}: unexpected Megatron-LM legacy T5 tensor '{side}.{kind}'")


def core_tensors(ck: dict, where: str) -> dict:
    """One legacy T5 shard's tensors under megatron-core T5 names (what :func:`.megatron_t5.tensors` gives)."""
    model, args = ck["model"], ck.get("args")
    left = [k for k in model if k not in _MODEL_KEYS]
    if left:
        raise ConversionError(f"{where}: unexpected entry '{left[0]}' in a Megatron-LM legacy T5 model")
    if int(getattr(args, "pipeline_model_parallel_size", 1) or 1) > 1:
        raise ConversionError(f"{where}: Megatron-LM legacy T5 checkpoints with pipeline parallelism are not "
                              f"supported")
    if getattr(args, "swiglu", False):
        raise ConversionError(f"{where}: a SwiGLU T5 has no mwb equivalent among Megatron's T5 layouts")
    heads = getattr(args, "num_attention_heads", None)
    tp = int(getattr(args, "tensor_model_parallel_size", 1) or 1)
    if not isinstance(heads, int) or heads % tp:
        raise ConversionError(f"{where}: num_attention_heads {heads!r:.20} does not split over TP {tp}")
    version = float(ck.get("checkpoint_version", 0.0))
    lm = model["language_model"]
    out = {}
    for k, v in megatron_rows.flatten_tensors(lm.get("embedding", {})).items():
        if k not in ("word_embeddings.weight", "position_embeddings.weight"):
            raise ConversionError(f"{where}: unexpected Megatron-LM legacy T5 tensor 'embedding.{k}' "
                                  f"(tokentype embeddings have no mwb T5 equivalent)")
        out["embedding." + k] = v
    for side in ("encoder", "decoder"):
        for k, v in megatron_rows.flatten_tensors(lm.get(side, {})).items():
            head, _, tail = k.partition(".")
            if head in ("final_layernorm", "final_norm"):
                out[f"{side}.final_layernorm.{tail}"] = v
                continue
            i, _, kind = tail.partition(".")
            if head != "layers" or not i.isdigit():
                raise ConversionError(f"{where}: unexpected Megatron-LM legacy T5 tensor '{side}.{k}'")
            name, parts = _layer_name(side, kind, where)
            out[f"{side}.layers.{i}.{name}"] = _to_core_rows(v, version, heads // tp, parts, where) if parts else v
    for k, v in megatron_rows.flatten_tensors(model.get("lm_head", {})).items():
        if k != "bias":
            raise ConversionError(f"{where}: unexpected Megatron-LM legacy T5 tensor 'lm_head.{k}'")
        out["lm_head.output_layer.bias"] = v
    others = [k for k in lm if k not in ("embedding", "encoder", "decoder")]
    if others:
        raise ConversionError(f"{where}: unexpected part '{others[0]}' of a Megatron-LM legacy T5 language model")
    return out
