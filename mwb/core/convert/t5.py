"""T5 (``T5ForConditionalGeneration``) ↔ mwb T5 with relative position buckets.

mwb's T5 with ``position_embedding: relative``, RMSNorm and no biases is Hugging Face's T5 layer for layer
(see :mod:`mwb.core.models.t5`): ``shared`` → ``embed.word``; per block ``layer.0`` self-attention,
``layer.1`` cross-attention (decoder), last ``layer`` the feed-forward, each with its pre-norm
``layer_norm``; the relative-bias tables that Hugging Face keeps in block 0 of each stack are the stacks'
``relative_bias`` (shared by all their layers). Feed-forward: ``relu`` (T5 v1.0) → ``DenseReluDense.wi/wo``
= ``up_proj/down_proj``; ``gated-gelu`` (v1.1, flan-T5) → ``DenseReluDense.wi_0/wi_1/wo`` =
``gate_proj/up_proj/down_proj`` with tanh-gelu (``geglu_tanh``); ``gated-silu`` is SwiGLU.

Head. T5 v1.0 ties the head to ``shared`` and scales the decoder output by d_model^-0.5; v1.1 has its own
``lm_head`` and no scaling. ``transformers`` ≥ 5 always ties unless the file holds a different ``lm_head``,
and says whether to scale in ``scale_decoder_outputs`` (from ``tie_word_embeddings`` of older configs), so a
freshly built v1.1 model is tied *and* unscaled: mwb keeps the two as ``tie_embeddings`` and
``t5_scale_decoder_output``. Exports write ``tie_word_embeddings`` = scaling (what older ``transformers``
read for both) and an explicit ``lm_head.weight`` whenever that flag alone would tie wrongly.
"""
from __future__ import annotations

import torch

from .hf_io import ConversionError, take

NAME = "t5"
ARCHITECTURE = "T5ForConditionalGeneration"

# feed_forward_proj → mwb activation; HF maps "gated-gelu" to the tanh approximation (gelu_new)
_FFN = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gated-gelu": "geglu_tanh",
        "gated-gelu_new": "geglu_tanh", "gated-silu": "swiglu"}
_FFN_BACK = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "geglu_tanh": "gated-gelu",
             "swiglu": "gated-silu"}
_BIAS = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"


def matches_hf(hf: dict) -> bool:
    return hf.get("model_type") == "t5"


def matches_mwb(m: dict) -> bool:
    return m["arch"] == "t5"


def _scales(hf: dict) -> bool:
    if "scale_decoder_outputs" in hf:
        return bool(hf["scale_decoder_outputs"])
    return hf.get("tie_word_embeddings", True) is not False


def model_config(hf: dict) -> dict:
    ffn = hf.get("feed_forward_proj", "relu")
    if ffn not in _FFN:
        raise ConversionError(f"T5 feed_forward_proj '{ffn}' is not supported ({', '.join(_FFN)})")
    if hf.get("is_decoder") or not hf.get("is_encoder_decoder", True):
        raise ConversionError("only the encoder-decoder T5 (T5ForConditionalGeneration) converts to mwb")
    heads, d_kv = hf["num_heads"], hf["d_kv"]
    scale = _scales(hf)
    return {"arch": "t5", "num_layers": hf["num_layers"],
            "num_decoder_layers": hf.get("num_decoder_layers") or hf["num_layers"],
            "hidden_size": hf["d_model"], "num_attention_heads": heads, "num_query_groups": None,
            "kv_channels": d_kv, "ffn_hidden_size": hf["d_ff"], "vocab_size": hf["vocab_size"],
            "max_position_embeddings": hf.get("n_positions", 512), "normalization": "rmsnorm",
            "norm_eps": hf.get("layer_norm_epsilon", 1e-6), "activation": _FFN[ffn],
            "position_embedding": "relative",
            "relative_attention_num_buckets": hf.get("relative_attention_num_buckets", 32),
            "relative_attention_max_distance": hf.get("relative_attention_max_distance", 128),
            "dropout": hf.get("dropout_rate", 0.1), "attention_dropout": hf.get("dropout_rate", 0.1),
            "bias": False, "tie_embeddings": scale, "t5_scale_decoder_output": scale}


def _ffn_names(gated: bool) -> tuple:
    if gated:
        return ("wi_0", "gate_proj"), ("wi_1", "up_proj"), ("wo", "down_proj")
    return ("wi", "up_proj"), ("wo", "down_proj")


def _pairs(m: dict):
    """(HF name, mwb name) of every tensor except the embedding and the head."""
    gated = m["activation"] in ("geglu_tanh", "swiglu")
    n_dec = m.get("num_decoder_layers") or m["num_layers"]
    for stack, n in (("encoder", m["num_layers"]), ("decoder", n_dec)):
        yield f"{stack}.{_BIAS}", f"{stack}.relative_bias.weight"
        yield f"{stack}.final_layer_norm.weight", f"{stack}.norm.weight"
        for i in range(n):
            hf, mw = f"{stack}.block.{i}.layer.", f"{stack}.layers.{i}."
            yield hf + "0.layer_norm.weight", mw + "ln1.weight"
            for x in "qkvo":
                yield f"{hf}0.SelfAttention.{x}.weight", f"{mw}attn.{x}_proj.weight"
            ff = 1
            if stack == "decoder":
                ff = 2
                yield hf + "1.layer_norm.weight", mw + "ln_cross.weight"
                for x in "qkvo":
                    yield f"{hf}1.EncDecAttention.{x}.weight", f"{mw}cross_attn.{x}_proj.weight"
            yield f"{hf}{ff}.layer_norm.weight", mw + "ln2.weight"
            for a, b in _ffn_names(gated):
                yield f"{hf}{ff}.DenseReluDense.{a}.weight", f"{mw}mlp.{b}.weight"


def to_mwb(sd: dict, m: dict) -> dict:
    """HF tensors → mwb tensors; sets ``m["tie_embeddings"]`` from whether the file has its own head."""
    sd = dict(sd)
    where = "T5 checkpoint"
    out = {"embed.word.weight": take(sd, "shared.weight", where)}
    head = sd.pop("lm_head.weight", None)
    m["tie_embeddings"] = head is None or torch.equal(head, out["embed.word.weight"])
    if not m["tie_embeddings"]:
        out["head.weight"] = head
    for a, b in _pairs(m):
        out[b] = take(sd, a, where)
    ignored = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
               "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")
    left = [k for k in sd if k not in ignored]
    if left:
        raise ConversionError(f"{where} has tensors mwb's T5 has no place for: {', '.join(left[:3])}"
                              f"{' …' if len(left) > 3 else ''}")
    return out


def check_mwb(m: dict) -> None:
    if m["position_embedding"] != "relative":
        raise ConversionError("this T5 has learned absolute positions (Megatron's T5), which Hugging Face T5 "
                              "cannot express; train with model.position_embedding=relative to export")
    if m["normalization"] != "rmsnorm" or m["bias"] or m["activation"] not in _FFN_BACK or \
            m.get("num_experts") or (m.get("num_query_groups") or m["num_attention_heads"]) != \
            m["num_attention_heads"]:
        raise ConversionError("Hugging Face T5 needs RMSNorm, no biases, no grouped-query attention or experts, "
                              f"and activation {' | '.join(_FFN_BACK)}")
    if m.get("t5_head_bias") or not m.get("t5_final_norm", True):
        raise ConversionError("Hugging Face T5 has no head bias and always final norms (model.t5_head_bias, "
                              "model.t5_final_norm: megatron-core's T5 layout)")


def _scale(m: dict) -> bool:
    s = m.get("t5_scale_decoder_output")
    return m["tie_embeddings"] if s is None else bool(s)


def hf_config(m: dict, vocab: int, base: dict) -> dict:
    heads = m["num_attention_heads"]
    cfg = dict(base)
    cfg.update({"architectures": [ARCHITECTURE], "model_type": "t5", "vocab_size": vocab,
                "d_model": m["hidden_size"], "d_kv": m.get("kv_channels") or m["hidden_size"] // heads,
                "d_ff": m["ffn_hidden_size"], "num_layers": m["num_layers"],
                "num_decoder_layers": m.get("num_decoder_layers") or m["num_layers"], "num_heads": heads,
                "relative_attention_num_buckets": m["relative_attention_num_buckets"],
                "relative_attention_max_distance": m["relative_attention_max_distance"],
                "dropout_rate": m["dropout"], "layer_norm_epsilon": m["norm_eps"],
                "feed_forward_proj": _FFN_BACK[m["activation"]], "is_encoder_decoder": True,
                "tie_word_embeddings": _scale(m), "scale_decoder_outputs": _scale(m)})
    for k in ("dense_act_fn", "is_gated_act"):  # derived from feed_forward_proj when loaded
        cfg.pop(k, None)
    if not base:
        cfg.update({"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0})
    return cfg


def to_hf(sd: dict, m: dict) -> dict:
    check_mwb(m)
    out = {"shared.weight": sd["embed.word.weight"]}
    if not m["tie_embeddings"]:
        out["lm_head.weight"] = sd["head.weight"]
    elif not _scale(m):  # tied but unscaled: older transformers would untie on tie_word_embeddings=False
        out["lm_head.weight"] = sd["embed.word.weight"].clone()
    for a, b in _pairs(m):
        out[a] = sd[b]
    return out
