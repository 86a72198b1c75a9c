"""mwb GPT, BERT or T5 → a megatron-core ``torch_dist`` checkpoint that Megatron-LM loads with ``--load OUT
--use-checkpoint-args`` (BERT and T5 tensors and args: :mod:`.megatron_write_bert_t5`).

``OUT`` is a save directory: ``latest_checkpointed_iteration.txt`` saying ``release`` and ``release/`` with
``metadata.json`` (``torch_dist`` backend), ``common.pt`` (``args``, ``checkpoint_version`` 3.0, ``iteration``
0) and a PyTorch Distributed Checkpoint written with ``torch.distributed.checkpoint`` (``no_dist``: no process
group, on CPU; megatron-core's own writer wants CUDA). A ``release`` checkpoint is model-only: Megatron-LM
loads it without optimizer or RNG state, as it does NVIDIA's released weights, and starts at iteration 0.

Tensors are megatron-core's global TP-1 layout under its sharded keys, so any TP/PP job reads its slices:
decoder layers stacked on a leading axis (``decoder.layers.self_attention.linear_qkv.weight`` ``[L, …]``), QKV
rows group-major ``[ng, np/ng + 2, hn]``, SwiGLU ``linear_fc1`` ``[gate; up]``, the block norms under
``linear_qkv.layer_norm_*`` / ``linear_fc1.layer_norm_*`` (the names both the local and the Transformer
Engine layer specs load), ``output_layer`` only when untied. The embedding is padded with zero rows to
``make_vocab_size_divisible_by`` (``args.padded_vocab_size``); Megatron pads to that × TP, so a TP > 1 job
must be given a ``--make-vocab-size-divisible-by`` that yields the same padded size (docs/checkpoint.md).
``args.vocab_size`` is the true vocabulary size. The tokenizer files travel in ``OUT/tokenizer/``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

import torch

from ..atomic import atomic_write_json, atomic_write_text
from ..checkpoint.consolidate import mwb_state
from ..checkpoint.format import commit_directory, staging_dir
from ..models.transformer import padded_vocab_size
from .hf_io import ConversionError
from .megatron_write_layers import EXTRA_STATE_MODULES, _LAYER, extra_states, fuse_rows, padder, stack_layers


def check(m) -> None:
    if m.arch in ("bert", "t5"):
        from .megatron_write_bert_t5 import check_encoder
        return check_encoder(m)
    if m.arch != "gpt":
        raise ConversionError(f"--to megatron writes GPT, BERT and T5 models only (this one is '{m.arch}')")
    if m.num_experts:
        raise ConversionError("--to megatron does not write mixture-of-experts models")
    if m.activation not in ("gelu", "gelu_tanh", "swiglu"):
        raise ConversionError(f"activation '{m.activation}' has no megatron-core GPT equivalent (gelu, swiglu)")
    if m.position_embedding not in ("learned", "rope"):
        raise ConversionError(f"positions '{m.position_embedding}' have no megatron-core GPT equivalent")


def core_tensors(m, vocab: int, tensors: dict) -> tuple[dict, int]:
    """({megatron-core sharded key: global tensor}, padded vocabulary) of the mwb ``tensors``."""
    if m.arch in ("bert", "t5"):
        from .megatron_write_bert_t5 import encoder_tensors
        return encoder_tensors(m, vocab, tensors)
    padded, pad = padder(m, vocab)
    out = {"embedding.word_embeddings.weight": pad(tensors["embed.word.weight"]),
           "decoder.final_layernorm.weight": tensors["final_norm.weight"]}
    if "final_norm.bias" in tensors:
        out["decoder.final_layernorm.bias"] = tensors["final_norm.bias"]
    if m.position_embedding == "learned":
        out["embedding.position_embeddings.weight"] = tensors["embed.position.weight"]
    if not m.tie_embeddings:
        out["output_layer.weight"] = pad(tensors["head.weight"])
    out.update(stack_layers(m, tensors, "", "decoder", m.num_layers))
    return out, padded


def model_extra_states(m) -> dict:
    if m.arch in ("bert", "t5"):
        from .megatron_write_bert_t5 import encoder_extra_states
        return encoder_extra_states(m)
    return extra_states(m.num_layers)


def args_for(m, vocab: int, padded: int) -> argparse.Namespace:
    """The ``args`` Megatron-LM's ``--use-checkpoint-args`` reads (the architecture) and the readers need."""
    rope = m.position_embedding == "rope"
    return argparse.Namespace(
        num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_size,
        num_attention_heads=m.num_attention_heads, group_query_attention=m.query_groups != m.num_attention_heads,
        num_query_groups=m.query_groups, kv_channels=m.head_dim, max_position_embeddings=m.max_position_embeddings,
        seq_length=m.max_position_embeddings,
        position_embedding_type="rope" if rope else "learned_absolute", add_position_embedding=not rope,
        use_rotary_position_embeddings=rope, rotary_base=int(m.rope_theta), rotary_percent=1.0,
        rotary_interleaved=False, normalization="RMSNorm" if m.normalization == "rmsnorm" else "LayerNorm",
        norm_epsilon=m.norm_eps, layernorm_epsilon=m.norm_eps, apply_layernorm_1p=False,
        swiglu=m.activation == "swiglu", bias_gelu_fusion=m.activation == "gelu_tanh", openai_gelu=False,
        add_bias_linear=m.bias, add_qkv_bias=m.bias, untie_embeddings_and_output_weights=not m.tie_embeddings,
        apply_residual_connection_post_layernorm=False, hidden_dropout=m.dropout, attention_dropout=m.attn_dropout,
        init_method_std=m.init_std, padded_vocab_size=padded, vocab_size=vocab,
        make_vocab_size_divisible_by=m.make_vocab_size_divisible_by, tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1, ckpt_format="torch_dist", num_experts=None)


def mwb_to_megatron(src: str, dst: str, overwrite: bool = False) -> tuple[str, str]:
    """mwb checkpoint (any path form) → megatron-core ``torch_dist`` save directory; returns (dst, family)."""
    import torch.distributed.checkpoint as dcp
    from ..errors import CheckpointError
    cfg, vocab, tensors, tok = mwb_state(src)
    if cfg.lora.rank:
        raise ConversionError(f"{src} is a LoRA run: merge it first (mwb convert --merge) or export the base")
    m = cfg.model
    check(m)
    state, padded = core_tensors(m, vocab, {k: v.detach().contiguous() for k, v in tensors.items()})
    dst = os.path.abspath(dst)
    tmp = staging_dir(dst, overwrite, CheckpointError)
    rel = os.path.join(tmp, "release")
    os.makedirs(rel)
    # flat keys already; no planner_data mapping (megatron-core's loader would then miss the byte objects)
    dcp.save({**state, **model_extra_states(m)}, storage_writer=dcp.FileSystemWriter(rel), no_dist=True,
             planner=dcp.DefaultSavePlanner(flatten_state_dict=False))
    args = args_for(m, vocab, padded)
    if m.arch in ("bert", "t5"):
        from .megatron_write_bert_t5 import encoder_args
        encoder_args(m, args)
    if tok:  # where the vocabulary travels (Megatron-LM takes --vocab-file/--merge-file or --tokenizer-model)
        names = os.listdir(tok) if os.path.isdir(tok) else [os.path.basename(tok)]
        if "vocab.json" in names and "merges.txt" in names:
            args.tokenizer_type, args.vocab_file, args.merge_file = ("GPT2BPETokenizer", "tokenizer/vocab.json",
                                                                     "tokenizer/merges.txt")
        elif "vocab.txt" in names:  # WordPiece (BERT/T5): Megatron's BertWordPiece tokenizers, casing as mwb's
            lower = True
            if "tokenizer_config.json" in names:
                with open(os.path.join(tok, "tokenizer_config.json"), encoding="utf-8") as f:
                    lower = bool(json.load(f).get("do_lower_case", True))
            args.tokenizer_type = "BertWordPieceLowerCase" if lower else "BertWordPieceCase"
            args.vocab_file = "tokenizer/vocab.txt"
        else:
            args.tokenizer_type, args.tokenizer_model = "HuggingFaceTokenizer", "tokenizer"
    with open(os.path.join(rel, "common.pt.tmp"), "wb") as f:
        torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 0}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(os.path.join(rel, "common.pt.tmp"), os.path.join(rel, "common.pt"))
    atomic_write_json(os.path.join(rel, "metadata.json"), {"sharded_backend": "torch_dist",
                                                           "sharded_backend_version": 1,
                                                           "common_backend": "torch", "common_backend_version": 1})
    atomic_write_text(os.path.join(tmp, "latest_checkpointed_iteration.txt"), "release")
    if tok:
        tdir = os.path.join(tmp, "tokenizer")
        if os.path.isdir(tok):
            shutil.copytree(tok, tdir)
        else:
            os.makedirs(tdir)
            shutil.copy(tok, tdir)
    commit_directory(tmp, dst)
    return dst, f"megatron-core {m.arch}"


__all__ = ["args_for", "core_tensors", "mwb_to_megatron"]
