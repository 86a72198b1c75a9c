"""Llama family (``LlamaForCausalLM``, and Mistral without sliding windows) ↔ mwb GPT.

The names map one to one: Hugging Face's RoPE uses the rotate-half layout that mwb uses too, so q/k need
no permutation; SwiGLU gate/up/down, grouped-query attention (``num_key_value_heads``), RMSNorm, no
biases and an untied head unless ``tie_word_embeddings``. RoPE scaling variants (linear, dynamic, llama3,
yarn) are refused rather than silently approximated.
"""
from __future__ import annotations

from .hf_io import ConversionError, strip_prefix, take, untied_head

NAME = "llama"
ARCHITECTURE = "LlamaForCausalLM"
MODEL_TYPES = ("llama", "mistral")


def matches_hf(hf: dict) -> bool:
    return hf.get("model_type") in MODEL_TYPES


def matches_mwb(m: dict) -> bool:
    return (m["arch"] == "gpt" and m["position_embedding"] == "rope" and m["normalization"] == "rmsnorm"
            and m["activation"] == "swiglu" and not m.get("num_experts"))


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ConversionError(f"RoPE scaling '{kind}' is not supported by mwb (only the default RoPE)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def model_config(hf: dict) -> dict:
    if hf.get("hidden_act", "silu") != "silu":
        raise ConversionError(f"Llama activation '{hf.get('hidden_act')}' is not supported (silu / SwiGLU)")
    if hf.get("model_type") == "mistral" and hf.get("sliding_window"):
        raise ConversionError("Mistral sliding-window attention has no mwb equivalent")
    attn_bias, mlp_bias = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    if attn_bias != mlp_bias:
        raise ConversionError("attention_bias and mlp_bias differ; mwb has one model.bias switch")
    h, heads = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or h // heads
    return {"arch": "gpt", "num_layers": hf["num_hidden_layers"], "hidden_size": h, "num_attention_heads": heads,
            "num_query_groups": hf.get("num_key_value_heads") or heads, "ffn_hidden_size": hf["intermediate_size"],
            "kv_channels": head_dim if head_dim * heads != h else None, "vocab_size": hf["vocab_size"],
            "max_position_embeddings": hf.get("max_position_embeddings", 2048), "normalization": "rmsnorm",
            "norm_eps": hf.get("rms_norm_eps", 1e-6), "activation": "swiglu", "position_embedding": "rope",
            "rope_theta": _rope_theta(hf), "dropout": 0.0,
            "attention_dropout": float(hf.get("attention_dropout", 0.0)), "bias": attn_bias,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "init_std": hf.get("initializer_range", 0.02)}


_LAYER = {"self_attn.q_proj": "attn.q_proj", "self_attn.k_proj": "attn.k_proj", "self_attn.v_proj": "attn.v_proj",
          "self_attn.o_proj": "attn.o_proj", "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj",
          "mlp.down_proj": "mlp.down_proj", "input_layernorm": "ln1", "post_attention_layernorm": "ln2"}


def _params(m: dict, i: int):
    """(HF name, mwb name) for layer ``i``."""
    for a, b in _LAYER.items():
        yield f"model.layers.{i}.{a}.weight", f"layers.{i}.{b}.weight"
        if m["bias"] and "layernorm" not in a:
            yield f"model.layers.{i}.{a}.bias", f"layers.{i}.{b}.bias"


def to_mwb(sd: dict, m: dict) -> dict:
    sd = strip_prefix(dict(sd), "model.")
    where = "Llama checkpoint"
    out = {"embed.word.weight": take(sd, "model.embed_tokens.weight", where)}
    for i in range(m["num_layers"]):
        for a, b in _params(m, i):
            out[b] = take(sd, a, where)
    out["final_norm.weight"] = take(sd, "model.norm.weight", where)
    out.update(untied_head(sd, m, where))
    return out


def hf_config(m: dict, vocab: int, base: dict) -> dict:
    heads = m["num_attention_heads"]
    head_dim = m.get("kv_channels") or m["hidden_size"] // heads
    cfg = dict(base)
    cfg.pop("rope_scaling", None)
    cfg.update({"architectures": [ARCHITECTURE], "model_type": "llama", "vocab_size": vocab,
                "hidden_size": m["hidden_size"], "intermediate_size": m["ffn_hidden_size"],
                "num_hidden_layers": m["num_layers"], "num_attention_heads": heads,
                "num_key_value_heads": m.get("num_query_groups") or heads, "head_dim": head_dim,
                "hidden_act": "silu", "max_position_embeddings": m["max_position_embeddings"],
                "rms_norm_eps": m["norm_eps"],
                "rope_parameters": {"rope_type": "default", "rope_theta": m["rope_theta"]},
                "attention_bias": m["bias"], "mlp_bias": m["bias"],
                "attention_dropout": m["attention_dropout"] if m["attention_dropout"] is not None else m["dropout"],
                "tie_word_embeddings": m["tie_embeddings"], "initializer_range": m["init_std"]})
    if not base:
        cfg["bos_token_id"], cfg["eos_token_id"] = None, None
    return cfg


def to_hf(sd: dict, m: dict) -> dict:
    out = {"model.embed_tokens.weight": sd["embed.word.weight"], "model.norm.weight": sd["final_norm.weight"]}
    for i in range(m["num_layers"]):
        for a, b in _params(m, i):
            out[a] = sd[b]
    if not m["tie_embeddings"]:
        out["lm_head.weight"] = sd["head.weight"]
    return out
