"""mwb BERT and T5 → megatron-core ``torch_dist`` tensors and args, for :mod:`.megatron_write` (which writes them).

The layouts are megatron-core 0.16's sharded state dicts (keys printed from ``BertModel(bert_layer_local_spec)``
and ``T5Model`` with the local encoder/decoder specs, saved with ``dist_checkpointing.save``):

  * BERT: ``embedding.{word,position,tokentype}_embeddings``, ``encoder.layers.X`` stacked ``[L, …]`` (norms
    under the fused ``linear_qkv.layer_norm_*`` / ``linear_fc1.layer_norm_*`` names), ``encoder.final_layernorm``,
    the MLM head ``lm_head.dense`` / ``lm_head.layer_norm`` + ``output_layer.bias`` (the vocab bias: the head is
    tied to the word embedding, as Megatron-LM's BERT always is), ``pooler.dense`` and ``binary_head`` when the
    model has its binary head;
  * T5: ``encoder.layers.X`` / ``decoder.layers.X`` stacked, the decoder with ``pre_cross_attn_layernorm``,
    ``cross_attention.linear_q``, ``cross_attention.linear_kv`` (rows ``[np, 2, hn]``) and
    ``cross_attention.linear_proj``; ``{encoder,decoder}.final_layernorm`` only with ``t5_final_norm`` (the TE
    spec; the local spec's blocks have none); the head ``lm_head.output_layer`` (``weight`` when untied, the vocab
    ``bias`` when tied: ``t5_head_bias``) and the aliases the model's sharded state dict also asks for
    (``position_embeddings.weight``, ``output_layer.*``).

What these layouts cannot hold is refused before anything is written: Hugging Face's post-norm BERT, a BERT
without its MLM head or with a pooler but no binary head, rotary or relative positions, a tied T5 head without
its bias or an untied one with a bias, the decoder-output rescaling, gated activations.
"""
from __future__ import annotations

import argparse

from .hf_io import ConversionError
from .megatron_write_layers import EXTRA_STATE_MODULES, _LAYER, extra_states, padder, stack_layers

_T5_DECODER = {**_LAYER, "ln_cross.weight": "pre_cross_attn_layernorm.weight",
               "ln_cross.bias": "pre_cross_attn_layernorm.bias",
               "cross_attn.q_proj.weight": "cross_attention.linear_q.weight",
               "cross_attn.q_proj.bias": "cross_attention.linear_q.bias",
               "cross_attn.o_proj.weight": "cross_attention.linear_proj.weight",
               "cross_attn.o_proj.bias": "cross_attention.linear_proj.bias"}
_CROSS_MODULES = ("cross_attention.linear_q", "cross_attention.linear_kv", "cross_attention.linear_proj")


def check_encoder(m) -> None:
    """One ConversionError line for a BERT / T5 the megatron-core layout cannot hold."""
    if m.num_experts:
        raise ConversionError("--to megatron does not write mixture-of-experts models")
    if m.activation not in ("gelu", "gelu_tanh"):
        raise ConversionError(f"activation '{m.activation}' has no megatron-core {m.arch.upper()} equivalent here "
                              f"(gelu)")
    if m.position_embedding != "learned":
        raise ConversionError(f"positions '{m.position_embedding}' are not written for megatron-core "
                              f"{m.arch.upper()} (learned only)")
    if m.query_groups != m.num_attention_heads:
        raise ConversionError(f"grouped-query attention is not written for megatron-core {m.arch.upper()}")
    if m.arch == "bert":
        if m.bert_post_norm:
            raise ConversionError("a post-norm (Hugging Face layout) BERT has no megatron-core BertModel "
                                  "equivalent (pre-norm only)")
        if not m.bert_lm_head:
            raise ConversionError("a BERT without its masked-LM head has no megatron-core BertModel equivalent")
        if m.bert_pooler and not m.bert_binary_head:
            raise ConversionError("a BERT pooler without the binary head has no megatron-core BertModel "
                                  "equivalent")
        if not m.tie_embeddings:
            raise ConversionError("an untied BERT head is not written (megatron-core's BERT ties it)")
        return
    if m.t5_scale_decoder_output:
        raise ConversionError("t5_scale_decoder_output (decoder output × hidden^-0.5) has no megatron-core "
                              "T5Model equivalent")
    if m.tie_embeddings != m.t5_head_bias:
        raise ConversionError("megatron-core's T5 head has a vocab bias exactly when tied: tie_embeddings "
                              f"{m.tie_embeddings} with t5_head_bias {m.t5_head_bias} cannot be written")


def encoder_tensors(m, vocab: int, tensors: dict) -> tuple[dict, int]:
    """({megatron-core sharded key: global tensor}, padded vocabulary) of an mwb BERT or T5."""
    padded, pad = padder(m, vocab)
    out = {"embedding.word_embeddings.weight": pad(tensors["embed.word.weight"]),
           "embedding.position_embeddings.weight": tensors["embed.position.weight"]}
    bias = ("weight", "bias") if m.normalization == "layernorm" else ("weight",)
    if m.arch == "bert":
        if m.num_tokentypes:
            out["embedding.tokentype_embeddings.weight"] = tensors["embed.tokentype.weight"]
        out.update(stack_layers(m, tensors, "", "encoder", m.num_layers))
        for s in bias:
            out[f"encoder.final_layernorm.{s}"] = tensors[f"final_norm.{s}"]
        for a, b in (("dense.weight", "dense.weight"), ("dense.bias", "dense.bias"),
                     ("norm.weight", "layer_norm.weight"), ("norm.bias", "layer_norm.bias")):
            out[f"lm_head.{b}"] = tensors[f"lm_transform.{a}"]
        out["output_layer.bias"] = pad(tensors["head.bias"])
        if m.bert_binary_head:
            for s in ("weight", "bias"):
                out[f"pooler.dense.{s}"] = tensors[f"pooler.dense.{s}"]
                out[f"binary_head.{s}"] = tensors[f"binary_classifier.{s}"]
        return out, padded
    out["position_embeddings.weight"] = out["embedding.position_embeddings.weight"].clone()
    out.update(stack_layers(m, tensors, "encoder.", "encoder", m.num_layers))
    out.update(stack_layers(m, tensors, "decoder.", "decoder", m.num_decoder_layers or m.num_layers, _T5_DECODER))
    if m.t5_final_norm:
        for side in ("encoder", "decoder"):
            for s in bias:
                out[f"{side}.final_layernorm.{s}"] = tensors[f"{side}.norm.{s}"]
    head = "bias" if m.tie_embeddings else "weight"
    out[f"lm_head.output_layer.{head}"] = pad(tensors[f"head.{head}"])
    out[f"output_layer.{head}"] = out[f"lm_head.output_layer.{head}"].clone()
    return out, padded


def encoder_extra_states(m) -> dict:
    """The ``_extra_state`` objects megatron-core's BertModel / T5Model loader asks for: per layer, and the
    vocab output layer's (``output_layer`` and, for T5, its ``lm_head.output_layer`` name)."""
    top = {"output_layer._extra_state/shard_0_1": [None]}
    if m.arch == "bert":
        return {**extra_states(m.num_layers, "encoder"), **top}
    return {**extra_states(m.num_layers, "encoder"),
            **extra_states(m.num_decoder_layers or m.num_layers, "decoder", EXTRA_STATE_MODULES + _CROSS_MODULES),
            **top, "lm_head.output_layer._extra_state/shard_0_1": [None]}


def encoder_args(m, args: argparse.Namespace) -> None:
    """The BERT / T5 fields Megatron-LM's ``pretrain_bert.py`` / ``pretrain_t5.py`` and mwb's reader read,
    set on the GPT-style ``args``."""
    args.position_embedding_type, args.add_position_embedding = "learned_absolute", True
    if m.arch == "bert":
        args.bert_binary_head, args.num_tokentypes = bool(m.bert_binary_head), int(m.num_tokentypes)
        args.untie_embeddings_and_output_weights = False
        return
    dec = m.num_decoder_layers or m.num_layers
    args.encoder_num_layers, args.decoder_num_layers = m.num_layers, dec
    args.encoder_seq_length = args.decoder_seq_length = m.max_position_embeddings
