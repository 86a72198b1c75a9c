"""GPT-2 (``GPT2LMHeadModel``) ↔ mwb GPT.

Differences the mapping takes care of:
  * GPT-2's projections are ``Conv1D`` modules whose weights are stored ``[in, out]``: every one is
    transposed to ``nn.Linear``'s ``[out, in]``;
  * the fused ``c_attn`` projection (``[h, 3h]``) is split into q, k, v (in that order along ``out``);
  * activation: ``gelu_new`` / ``gelu_pytorch_tanh`` are the tanh approximation (mwb ``gelu_tanh``),
    ``gelu`` the exact one; learned absolute positions, LayerNorm, biases everywhere, tied head.
"""
from __future__ import annotations

import torch

from .hf_io import ConversionError, strip_prefix, take, untied_head

NAME = "gpt2"
ARCHITECTURE = "GPT2LMHeadModel"
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu": "gelu", "relu": "relu"}


def matches_hf(hf: dict) -> bool:
    return hf.get("model_type") == "gpt2"


def matches_mwb(m: dict) -> bool:
    return (m["arch"] == "gpt" and m["position_embedding"] == "learned" and m["normalization"] == "layernorm"
            and m["activation"] in ("gelu", "gelu_tanh", "relu") and not m.get("num_experts"))


def model_config(hf: dict) -> dict:
    if hf.get("scale_attn_by_inverse_layer_idx") or not hf.get("scale_attn_weights", True):
        raise ConversionError("GPT-2 checkpoints with scale_attn_by_inverse_layer_idx or without "
                              "scale_attn_weights have no mwb equivalent")
    if hf.get("add_cross_attention"):
        raise ConversionError("GPT-2 with cross-attention has no mwb GPT equivalent")
    act = hf.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise ConversionError(f"GPT-2 activation '{act}' is not supported ({', '.join(ACTIVATIONS)})")
    h = hf["n_embd"]
    return {"arch": "gpt", "num_layers": hf["n_layer"], "hidden_size": h, "num_attention_heads": hf["n_head"],
            "num_query_groups": None, "ffn_hidden_size": hf.get("n_inner") or 4 * h, "kv_channels": None,
            "vocab_size": hf["vocab_size"], "max_position_embeddings": hf["n_positions"],
            "normalization": "layernorm", "norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "activation": ACTIVATIONS[act], "position_embedding": "learned",
            "dropout": hf.get("resid_pdrop", 0.1), "attention_dropout": hf.get("attn_pdrop", 0.1),
            "bias": True, "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "init_std": hf.get("initializer_range", 0.02)}


def to_mwb(sd: dict, m: dict) -> dict:
    sd = strip_prefix(dict(sd), "transformer.")
    h, out, where = m["hidden_size"], {}, "GPT-2 checkpoint"
    t = lambda k: take(sd, "transformer." + k, where)  # noqa: E731
    out["embed.word.weight"] = t("wte.weight")
    out["embed.position.weight"] = t("wpe.weight")
    for i in range(m["num_layers"]):
        p, q = f"h.{i}.", f"layers.{i}."
        w, b = t(p + "attn.c_attn.weight"), t(p + "attn.c_attn.bias")
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[q + f"attn.{name}.weight"] = w[:, j * h:(j + 1) * h].t().contiguous()
            out[q + f"attn.{name}.bias"] = b[j * h:(j + 1) * h].clone()
        out[q + "attn.o_proj.weight"] = t(p + "attn.c_proj.weight").t().contiguous()
        out[q + "attn.o_proj.bias"] = t(p + "attn.c_proj.bias")
        out[q + "mlp.up_proj.weight"] = t(p + "mlp.c_fc.weight").t().contiguous()
        out[q + "mlp.up_proj.bias"] = t(p + "mlp.c_fc.bias")
        out[q + "mlp.down_proj.weight"] = t(p + "mlp.c_proj.weight").t().contiguous()
        out[q + "mlp.down_proj.bias"] = t(p + "mlp.c_proj.bias")
        for a, b_ in (("ln_1", "ln1"), ("ln_2", "ln2")):
            out[q + f"{b_}.weight"] = t(p + f"{a}.weight")
            out[q + f"{b_}.bias"] = t(p + f"{a}.bias")
    out["final_norm.weight"] = t("ln_f.weight")
    out["final_norm.bias"] = t("ln_f.bias")
    out.update(untied_head(sd, m, where))
    return out


def hf_config(m: dict, vocab: int, base: dict) -> dict:
    act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}[m["activation"]]
    cfg = dict(base)
    cfg.update({"architectures": [ARCHITECTURE], "model_type": "gpt2", "vocab_size": vocab,
                "n_positions": m["max_position_embeddings"], "n_embd": m["hidden_size"],
                "n_layer": m["num_layers"], "n_head": m["num_attention_heads"],
                "n_inner": m["ffn_hidden_size"], "activation_function": act,
                "layer_norm_epsilon": m["norm_eps"], "resid_pdrop": m["dropout"], "embd_pdrop": m["dropout"],
                "attn_pdrop": m["attention_dropout"] if m["attention_dropout"] is not None else m["dropout"],
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                "tie_word_embeddings": m["tie_embeddings"], "initializer_range": m["init_std"]})
    if not base:  # GPT-2's default special tokens (50256) only exist in its own vocabulary
        cfg["bos_token_id"] = cfg["eos_token_id"] = vocab - 1
    return cfg


def check_mwb(m: dict) -> None:
    if not m["bias"]:
        raise ConversionError("GPT-2 has biases everywhere; this model was trained with model.bias=false")
    if (m.get("num_query_groups") or m["num_attention_heads"]) != m["num_attention_heads"]:
        raise ConversionError("GPT-2 has no grouped-query attention (model.num_query_groups is set)")
    if m.get("kv_channels") and m["kv_channels"] * m["num_attention_heads"] != m["hidden_size"]:
        raise ConversionError("GPT-2 needs kv_channels × heads = hidden_size")


def to_hf(sd: dict, m: dict) -> dict:
    check_mwb(m)
    out = {"transformer.wte.weight": sd["embed.word.weight"], "transformer.wpe.weight": sd["embed.position.weight"]}
    for i in range(m["num_layers"]):
        p, q = f"transformer.h.{i}.", f"layers.{i}."
        out[p + "attn.c_attn.weight"] = torch.cat([sd[q + f"attn.{n}.weight"] for n in ("q_proj", "k_proj", "v_proj")],
                                                  dim=0).t().contiguous()
        out[p + "attn.c_attn.bias"] = torch.cat([sd[q + f"attn.{n}.bias"] for n in ("q_proj", "k_proj", "v_proj")])
        out[p + "attn.c_proj.weight"] = sd[q + "attn.o_proj.weight"].t().contiguous()
        out[p + "attn.c_proj.bias"] = sd[q + "attn.o_proj.bias"]
        out[p + "mlp.c_fc.weight"] = sd[q + "mlp.up_proj.weight"].t().contiguous()
        out[p + "mlp.c_fc.bias"] = sd[q + "mlp.up_proj.bias"]
        out[p + "mlp.c_proj.weight"] = sd[q + "mlp.down_proj.weight"].t().contiguous()
        out[p + "mlp.c_proj.bias"] = sd[q + "mlp.down_proj.bias"]
        for a, b in (("ln_1", "ln1"), ("ln_2", "ln2")):
            out[p + f"{a}.weight"] = sd[q + f"{b}.weight"]
            out[p + f"{a}.bias"] = sd[q + f"{b}.bias"]
    out["transformer.ln_f.weight"] = sd["final_norm.weight"]
    out["transformer.ln_f.bias"] = sd["final_norm.bias"]
    if not m["tie_embeddings"]:
        out["lm_head.weight"] = sd["head.weight"]
    return out
