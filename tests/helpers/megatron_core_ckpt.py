"""megatron-core ``--ckpt-format torch`` checkpoints from a full (TP 1) megatron-core state dict.

Splits the way megatron-core's layers are sharded: ``ColumnParallelLinear`` (``linear_qkv``, ``linear_fc1``,
``output_layer``) and ``VocabParallelEmbedding`` along rows, ``RowParallelLinear`` (``linear_proj``,
``linear_fc2``) along columns, the rest replicated; a gated ``linear_fc1`` (SwiGLU) is ``[gate; up]`` on every
rank, so each half is split on its own. T5's cross-attention ``linear_q``/``linear_kv`` are column-parallel
(``linear_kv`` rows ``[np, 2, hn]``, so a row split keeps whole heads), its ``linear_proj`` row-parallel and
its ``lm_head.output_layer`` split over the vocabulary. ``linear_qkv``'s rows are group-major (``[ng, np/ng + 2, hn]``), so a
plain row split gives each rank its whole groups; BERT's ``output_layer.bias`` (its head is tied) is split over
the vocabulary like the embedding, its ``lm_head``, ``pooler`` and ``binary_head`` replicated. Pipeline
stage p keeps its layers renumbered from 0; with
tied embeddings the last stage (when not also the first) holds ``output_layer.weight`` as megatron-core does.
"""
from __future__ import annotations

import argparse
import os
import re

import torch

from tests.helpers.megatron_legacy import shard_dir, write_tracker

_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight",
           "mlp.linear_fc1.bias", "cross_attention.linear_q.weight", "cross_attention.linear_q.bias",
           "cross_attention.linear_kv.weight", "cross_attention.linear_kv.bias")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight", "cross_attention.linear_proj.weight")
_VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight", "output_layer.bias",
          "lm_head.output_layer.weight", "lm_head.output_layer.bias")


def _tp_piece(key: str, t: torch.Tensor, rank: int, tp: int, swiglu: bool) -> torch.Tensor:
    tail = key.split(".", 3)[-1] if key.startswith(("decoder.layers.", "encoder.layers.")) else key
    if swiglu and tail.startswith("mlp.linear_fc1."):
        gate, up = t.chunk(2)
        return torch.cat([gate.chunk(tp)[rank], up.chunk(tp)[rank]]).clone()
    if tail in _COLUMN or key in _VOCAB:
        return t.chunk(tp)[rank].clone()
    if tail in _ROW:
        return t.chunk(tp, dim=1)[rank].clone()
    return t.clone()


def core_args(spec: dict, tp: int, pp: int) -> argparse.Namespace:
    if spec.get("arch") == "t5":
        bert = {"tokenizer_type": "BertWordPieceLowerCase", "vocab_file": "bert-vocab.txt", "merge_file": None,
                "encoder_num_layers": spec["num_layers"], "decoder_num_layers": spec["num_layers"]}
    elif spec.get("arch") == "bert":
        bert = {"tokenizer_type": "BertWordPieceLowerCase", "vocab_file": "bert-vocab.txt", "merge_file": None,
                "bert_binary_head": True, "num_tokentypes": spec["tokentypes"]}
    else:
        bert = {"tokenizer_type": "GPT2BPETokenizer", "vocab_file": "gpt2-vocab.json",
                "merge_file": "gpt2-merges.txt"}
    return argparse.Namespace(**bert,
        num_layers=spec["num_layers"], hidden_size=spec["hidden_size"], num_attention_heads=spec["heads"],
        group_query_attention=spec["groups"] != spec["heads"], num_query_groups=spec["groups"],
        ffn_hidden_size=spec["ffn"], max_position_embeddings=spec["max_pos"],
        position_embedding_type=spec["pos"], normalization=spec["norm"], swiglu=spec["swiglu"],
        add_bias_linear=spec["bias"], untie_embeddings_and_output_weights=not spec["tied"], norm_epsilon=1e-5,
        bias_gelu_fusion=False, openai_gelu=False, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        padded_vocab_size=spec["padded_vocab"], make_vocab_size_divisible_by=8, rotary_base=10000,
        rotary_percent=1.0, ckpt_format="torch")


def write_core_torch(ref: dict, spec: dict, save: str, tp: int = 1, pp: int = 1, iteration: int = 500) -> str:
    d = write_tracker(save, iteration)
    state, per = ref["state"], spec["num_layers"] // pp
    args = core_args(spec, tp, pp)
    for p in range(pp):
        for r in range(tp):
            model = {}
            for k, v in state.items():
                m = re.match(r"^(decoder|encoder)\.layers\.(\d+)\.(.+)$", k)
                if m:
                    i = int(m.group(2))
                    if p * per <= i < (p + 1) * per:
                        model[f"{m.group(1)}.layers.{i - p * per}.{m.group(3)}"] = _tp_piece(k, v, r, tp,
                                                                                             spec["swiglu"])
                elif k.startswith("embedding."):
                    if p == 0:
                        model[k] = _tp_piece(k, v, r, tp, False)
                elif p == pp - 1:
                    model[k] = _tp_piece(k, v, r, tp, False)
            if p == pp - 1 and spec["tied"] and pp > 1:  # megatron-core's copy of the embedding for the head
                model["output_layer.weight"] = state["embedding.word_embeddings.weight"].chunk(tp)[r].clone()
            for k in ref["extra_state_keys"]:
                model.setdefault(k, None)  # _extra_state entries, as megatron-core saves them
            torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration, "model": model},
                       shard_dir(d, r, p, pp))
    return d


def megatron_round_trip(mwb_dir, tmp_path, name: str, capsys) -> str:
    """``mwb convert MWB --to megatron`` then back to mwb; asserts every tensor and the model config come back
    bit-exact and returns the written ``torch_dist`` ``release/`` directory (for megatron-core to load)."""
    import json

    from safetensors.torch import load_file

    from mwb.core.convert import convert
    from tests.helpers.cli import run_cli
    code, out, err = run_cli(["convert", str(mwb_dir), str(tmp_path / f"{name}-mcore"), "--to", "megatron"], capsys)
    assert code == 0, err
    back = tmp_path / f"{name}-back"
    convert(str(tmp_path / f"{name}-mcore"), str(back))
    a, b = load_file(str(mwb_dir / "shard_00000.safetensors")), load_file(str(back / "shard_00000.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name  # bit-exact
    ma, mb = (json.loads((p / "metadata.json").read_text())["config"]["model"] for p in (mwb_dir, back))
    assert ma == mb, name
    return str(tmp_path / f"{name}-mcore" / "release")
