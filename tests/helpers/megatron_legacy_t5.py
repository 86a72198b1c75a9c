"""Megatron-LM legacy T5 checkpoints written from a megatron-core ``T5Model`` state dict, for the reader's tests.

The legacy names are taken from Megatron-LM's legacy code (``megatron/legacy/model/t5_model.py``,
``language_model.py``, ``transformer.py`` at the parent of commit 81b8b5acc0), not from mwb's reader: the
model dict is ``language_model`` → ``embedding`` / ``encoder`` / ``decoder`` plus ``lm_head`` → ``bias``. A
``ParallelTransformerLayer`` runs ``input_layernorm`` → ``self_attention`` → ``post_attention_layernorm`` →
(decoder: ``inter_attention`` → ``post_inter_attention_layernorm`` →) ``mlp``, which is megatron-core's
``input_layernorm`` → ``self_attention`` → (decoder: ``pre_cross_attn_layernorm`` → ``cross_attention`` →)
``pre_mlp_layernorm`` → ``mlp``; so the table below follows the order of the two forwards. Fused rows
(``query_key_value``, ``key_value``) are written per TP shard in ``checkpoint_version``'s order
(:func:`tests.helpers.megatron_legacy.fuse_rows`); column-parallel tensors split along rows, row-parallel
weights along columns, the rest replicated.
"""
from __future__ import annotations

import torch

from tests.helpers.megatron_core_ckpt import core_args
from tests.helpers.megatron_legacy import fuse_rows, shard_dir, write_tracker

# megatron-core name (after "{side}.layers.N.", no .weight/.bias) → (legacy name, split: "col" | "row" | None)
_ENC = {"input_layernorm": ("input_layernorm", None), "self_attention.linear_proj": ("self_attention.dense", "row"),
        "pre_mlp_layernorm": ("post_attention_layernorm", None), "mlp.linear_fc1": ("mlp.dense_h_to_4h", "col"),
        "mlp.linear_fc2": ("mlp.dense_4h_to_h", "row")}
_DEC = {**_ENC, "pre_cross_attn_layernorm": ("post_attention_layernorm", None),
        "cross_attention.linear_q": ("inter_attention.query", "col"),
        "cross_attention.linear_proj": ("inter_attention.dense", "row"),
        "pre_mlp_layernorm": ("post_inter_attention_layernorm", None)}
_FUSED = {"self_attention.linear_qkv": ("self_attention.query_key_value", 3),
          "cross_attention.linear_kv": ("inter_attention.key_value", 2)}
_NEW_NAMES = {"input_layernorm": "input_norm", "post_attention_layernorm": "post_attention_norm",
              "post_inter_attention_layernorm": "post_inter_attention_norm", "final_layernorm": "final_norm"}


def _piece(t: torch.Tensor, split, rank: int, tp: int, bias: bool) -> torch.Tensor:
    if split == "col":
        return t.chunk(tp)[rank].clone()
    if split == "row" and not bias:
        return t.chunk(tp, dim=1)[rank].clone()
    return t.clone()


def _stack(state: dict, side: str, n: int, heads: int, rank: int, tp: int, version: float, new: bool) -> dict:
    table = _DEC if side == "decoder" else _ENC
    out = {}
    for i in range(n):
        for s in ("weight", "bias"):
            for core, (legacy, split) in table.items():
                legacy = _NEW_NAMES.get(legacy, legacy) if new else legacy
                out[f"layers.{i}.{legacy}.{s}"] = _piece(state[f"{side}.layers.{i}.{core}.{s}"], split, rank, tp,
                                                        s == "bias")
            for core, (legacy, parts) in _FUSED.items():
                if core.startswith("cross") and side == "encoder":
                    continue
                t = state[f"{side}.layers.{i}.{core}.{s}"]  # megatron-core rows: [np, parts, hn]
                x = t.view(heads, parts, -1, *t.shape[1:])
                mine = [x[:, j].reshape(heads * x.shape[2], *t.shape[1:]).chunk(tp)[rank] for j in range(parts)]
                out[f"layers.{i}.{legacy}.{s}"] = fuse_rows(tuple(mine), heads // tp, version)
    for s in ("weight", "bias"):
        out[f"{_NEW_NAMES['final_layernorm'] if new else 'final_layernorm'}.{s}"] = \
            state[f"{side}.final_layernorm.{s}"].clone()
    return out


def legacy_t5_model(state: dict, spec: dict, rank: int, tp: int, version: float, new: bool = False) -> dict:
    """TP rank ``rank``'s legacy ``model`` dict of a (final-norm, tied) megatron-core T5 state dict."""
    n, heads = spec["num_layers"], spec["heads"]
    emb = {"word_embeddings": {"weight": state["embedding.word_embeddings.weight"].chunk(tp)[rank].clone()},
           "position_embeddings": {"weight": state["embedding.position_embeddings.weight"].clone()}}
    lm = {"embedding": emb,
          "encoder": _stack(state, "encoder", n, heads, rank, tp, version, new),
          "decoder": _stack(state, "decoder", n, heads, rank, tp, version, new)}
    return {"language_model": lm, "lm_head": {"bias": state["lm_head.output_layer.bias"].chunk(tp)[rank].clone()}}


def write_legacy_t5(ref: dict, spec: dict, save: str, tp: int = 1, version: float = 3.0, new: bool = False,
                    args_extra: dict | None = None, iteration=1000) -> str:
    """A legacy T5 checkpoint of ``ref`` (a megatron-core reference: state dict of a tied T5 with final norms)."""
    d = write_tracker(save, iteration)
    args = core_args(spec, tp, 1)
    del args.ckpt_format
    for k, v in (args_extra or {}).items():
        setattr(args, k, v)
    for r in range(tp):
        model = legacy_t5_model(ref["state"], spec, r, tp, version, new)
        torch.save({"args": args, "checkpoint_version": version, "iteration": 0, "model": model},
                   shard_dir(d, r, 0, 1))
    return d


def converted_t5_delta(out: str, r: dict, vocab: int, label="") -> float:
    """Max |Δlogit| over the first ``vocab`` rows between the converted mwb T5 in ``out`` and the reference
    ``r`` (megatron-core's forward), after checking it came out tied, with its head bias and final norms."""
    from mwb.core.compose import load_full_model
    cfg, model, _ = load_full_model(out)
    assert (cfg.model.arch, cfg.model.tie_embeddings, cfg.model.t5_head_bias, cfg.model.t5_final_norm) == \
        ("t5", True, True, True)
    with torch.no_grad():
        logits = model(r["tokens"], r["dec_tokens"])[..., :vocab]
    d = (logits - r["logits"][..., :vocab]).abs().max().item()
    print(f"max |Δlogit| {label}: {d:.2e}")
    return d
