"""megatron-core model state dicts (``--ckpt-format torch``) under the legacy reader's uniform names.

A megatron-core run saved with ``--ckpt-format torch`` writes the same ``mp_rank_TT[_PPP]/model_optim_rng.pt``
files as the legacy trainer (``args``, ``checkpoint_version`` 3.0), but ``model`` is the flat
``state_dict()`` of megatron-core's ``GPTModel``: ``embedding.word_embeddings``, ``decoder.layers.N.…``
(N local to the pipeline stage), ``decoder.final_layernorm``, ``output_layer`` when the head is untied; or
of its ``BertModel``, whose block is ``encoder.layers.N.…`` / ``encoder.final_layernorm`` and which adds
``embedding.tokentype_embeddings``, the MLM head ``lm_head.dense`` / ``lm_head.layer_norm`` +
``output_layer.bias`` (vocab-parallel, like the legacy ``lm_head.bias``), ``pooler.dense`` and
``binary_head`` (names printed from megatron-core 0.16's ``BertModel(bert_layer_local_spec)``). This
module renames those keys to the names :mod:`.megatron_legacy` merges, so both layouts share one merge
(a ``T5Model``'s state dict keeps megatron-core's names and has a merge of its own, :mod:`.megatron_t5`):

  * ``self_attention.linear_qkv`` → ``attn.query_key_value``; its rows are ``[ng, np/ng + 2, hn]`` per TP
    shard (each query group's heads, then its key, then its value), the legacy ``[np, 3, hn]`` when ng = np;
  * ``self_attention.linear_qkv.layer_norm_weight`` (Transformer Engine's fused norm) or
    ``input_layernorm`` → ``input_layernorm``; ``mlp.linear_fc1.layer_norm_weight`` or ``pre_mlp_layernorm``
    → ``post_attention_layernorm``;
  * ``linear_proj`` → ``attn.dense``, ``linear_fc1`` → ``mlp.dense_h_to_4h`` (SwiGLU: ``[gate; up]`` per
    shard, as in the legacy layout), ``linear_fc2`` → ``mlp.dense_4h_to_h``;
  * ``*._extra_state`` (Transformer Engine / FP8 metadata) is ignored.
"""
from __future__ import annotations

import re

import torch

from .hf_io import ConversionError

_LAYER = re.compile(r"^(?:decoder|encoder)\.layers\.(\d+)\.(.+)$")
_NAMES = {"self_attention.linear_qkv.weight": "attn.query_key_value.weight",
          "self_attention.linear_qkv.bias": "attn.query_key_value.bias",
          "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
          "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
          "input_layernorm.weight": "input_layernorm.weight", "input_layernorm.bias": "input_layernorm.bias",
          "self_attention.linear_proj.weight": "attn.dense.weight",
          "self_attention.linear_proj.bias": "attn.dense.bias",
          "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
          "pre_mlp_layernorm.bias": "post_attention_layernorm.bias",
          "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
          "mlp.linear_fc1.layer_norm_bias": "post_attention_layernorm.bias",
          "mlp.linear_fc1.weight": "mlp.dense_h_to_4h.weight", "mlp.linear_fc1.bias": "mlp.dense_h_to_4h.bias",
          "mlp.linear_fc2.weight": "mlp.dense_4h_to_h.weight", "mlp.linear_fc2.bias": "mlp.dense_4h_to_h.bias"}
_TOP = {"embedding.word_embeddings.weight": "embedding.word_embeddings.weight",
        "embedding.position_embeddings.weight": "embedding.position_embeddings.weight",
        "decoder.final_layernorm.weight": "final_norm.weight", "decoder.final_layernorm.bias": "final_norm.bias",
        "output_layer.weight": "output_layer.weight",
        # BertModel
        "encoder.final_layernorm.weight": "final_norm.weight", "encoder.final_layernorm.bias": "final_norm.bias",
        "embedding.tokentype_embeddings.weight": "embedding.tokentype_embeddings.weight",
        "lm_head.dense.weight": "lm_head.dense.weight", "lm_head.dense.bias": "lm_head.dense.bias",
        "lm_head.layer_norm.weight": "lm_head.layernorm.weight", "lm_head.layer_norm.bias": "lm_head.layernorm.bias",
        "output_layer.bias": "lm_head.bias", "pooler.dense.weight": "pooler.dense.weight",
        "pooler.dense.bias": "pooler.dense.bias", "binary_head.weight": "binary_head.weight",
        "binary_head.bias": "binary_head.bias"}


def is_core_state(model: dict) -> bool:
    """Whether a shard's ``model`` is a flat megatron-core state dict (not the legacy nested one, whose keys
    are ``language_model`` / ``lm_head`` / ``binary_head`` holding dicts)."""
    return isinstance(model, dict) and any(isinstance(k, str) and k.startswith(("decoder.", "encoder."))
                                           for k in model)


def weights(model: dict):
    """``(name, tensor)`` of a megatron-core state dict, without what is not a weight: ``*._extra_state``
    (Transformer Engine / FP8 metadata) and other non-tensor entries. Every megatron-core reader (GPT/BERT here,
    :mod:`.megatron_t5`, NeMo's :mod:`.nemo`) reads a shard through it."""
    return ((k, v) for k, v in model.items() if isinstance(v, torch.Tensor) and not k.endswith("_extra_state"))


def uniform(model: dict, where: str) -> dict:
    """The megatron-core GPT or BERT state dict ``model`` under the legacy reader's names."""
    out = {}
    for k, v in weights(model):
        m = _LAYER.match(k)
        if m:
            if m.group(2).startswith("mlp.experts") or m.group(2).startswith("mlp.router"):
                raise ConversionError(f"{where}: mixture-of-experts megatron-core checkpoints are not supported")
            name = _NAMES.get(m.group(2))
            if name is None:
                raise ConversionError(f"{where}: unexpected megatron-core tensor '{k}' (not a GPT/BERT layer parameter)")
            out[f"layers.{m.group(1)}.{name}"] = v
        elif k in _TOP:
            out[_TOP[k]] = v
        else:
            raise ConversionError(f"{where}: unexpected megatron-core tensor '{k}' (GPT and BERT models only: "
                                  f"embedding, decoder/encoder, output_layer, lm_head, pooler, binary_head)")
    return out
