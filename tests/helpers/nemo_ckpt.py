"""Tiny NeMo checkpoints for the reader's tests and the logit-table benchmark, built with tarfile / DCP.

A NeMo 1 ``.nemo`` is a tar of ``model_config.yaml``, the weights (``model_weights.ckpt``, ``mp_rank_0X/``
shards or a ``model_weights/`` distributed checkpoint) and the tokenizer files the config names ``nemo:<file>``,
as NeMo's ``SaveRestoreConnector`` writes it; state-dict keys carry NeMo's ``model.`` prefix. A NeMo 2
directory is ``context/model.yaml`` + ``context/nemo_tokenizer/`` + ``weights/`` (``torch_dist``, ``module.``
keys). The weights come from the Megatron helpers (legacy keys from a Hugging Face GPT-2, or megatron-core's
own state dicts).
"""
from __future__ import annotations

import io
import json
import os
import tarfile

import torch
import yaml

from mwb.core.convert.megatron_legacy import flatten_tensors
from tests.helpers.megatron_legacy import write_bert, write_gpt2

V = 101


def vocab_files(n: int = V) -> dict:
    return {"abc123_vocab.json": json.dumps({chr(33 + i): i for i in range(n)}).encode(),
            "def456_merges.txt": b"#version: 0.2\n"}


def nemo_tar(path: str, config: dict, shards: dict, extra: dict | None = None, gz: bool = False) -> str:
    """A .nemo tar: ``./model_config.yaml``, ``shards`` {member: state dict}, ``extra`` {member: bytes}."""
    files = {"model_config.yaml": yaml.safe_dump(config).encode(), **(extra or {})}
    for name, sd in shards.items():
        buf = io.BytesIO()
        torch.save(sd, buf)
        files[name] = buf.getvalue()
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def tok_cfg() -> dict:
    return {"library": "megatron", "type": "GPT2BPETokenizer", "model": None,
            "vocab_file": "nemo:abc123_vocab.json", "merge_file": "nemo:def456_merges.txt"}


def legacy_nemo(gpt2, tmp_path, tp: int = 1, drop: str = "", tok_n: int = V, gz: bool = False) -> str:
    """A NeMo 1 .nemo of ``gpt2`` with legacy Megatron keys (``model.language_model.…``)."""
    d = write_gpt2(gpt2, str(tmp_path / "mlm"), tp=tp, version=2.0, new_names=True)
    shards = {}
    for t in range(tp):
        model = torch.load(os.path.join(d, f"mp_rank_{t:02d}", "model_optim_rng.pt"), weights_only=False)["model"]
        name = "model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"
        shards[name] = flatten_tensors({"language_model": model["language_model"]}, "model.")
    c = gpt2.config
    cfg = {"num_layers": c.n_layer, "hidden_size": c.n_embd, "ffn_hidden_size": 4 * c.n_embd,
           "num_attention_heads": c.n_head, "max_position_embeddings": c.n_positions,
           "position_embedding_type": "learned_absolute", "normalization": "layernorm", "activation": "gelu",
           "bias": True, "bias_activation_fusion": True, "share_embeddings_and_output_weights": True,
           "layernorm_epsilon": c.layer_norm_epsilon, "make_vocab_size_divisible_by": 8,
           "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1, "mcore_gpt": False,
           "tokenizer": tok_cfg()}
    if drop == "weights":
        shards = {}
    elif drop == "shard":
        shards.pop("mp_rank_01/model_weights.ckpt")
    elif drop:
        cfg.pop(drop)
    return nemo_tar(str(tmp_path / "model.nemo"), cfg, shards, vocab_files(tok_n), gz=gz)


def mcore_cfg(s: dict, tp: int) -> dict:
    return {"mcore_gpt": True, "num_layers": s["num_layers"], "hidden_size": s["hidden_size"],
            "ffn_hidden_size": s["ffn"], "num_attention_heads": s["heads"], "num_query_groups": s["groups"],
            "max_position_embeddings": s["max_pos"], "position_embedding_type": s["pos"],
            "normalization": s["norm"].lower(), "activation": "fast-swiglu" if s["swiglu"] else "gelu",
            "bias": s["bias"], "bias_activation_fusion": False, "share_embeddings_and_output_weights": s["tied"],
            "layernorm_epsilon": 1e-5, "make_vocab_size_divisible_by": 8, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": 1, "tokenizer": tok_cfg()}


def redcp(src_dir: str, dst_dir: str, prefix: str) -> None:
    """megatron-core's torch_dist checkpoint ``src_dir`` saved again with ``prefix`` on every model key."""
    import torch.distributed.checkpoint as dcp
    from mwb.core.convert.megatron_dist import load_tensors
    tensors = {prefix + k: v for k, v in load_tensors(src_dir).items()}
    dcp.save(tensors, storage_writer=dcp.FileSystemWriter(dst_dir), no_dist=True)
    with open(os.path.join(dst_dir, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1}, f)


def nemo2_dir(ref: dict, spec: dict, root) -> str:
    """A NeMo 2 directory (``context/model.yaml``, ``context/nemo_tokenizer/``, ``weights/``) of ``ref``."""
    redcp(ref["dist"], str(root / "weights"), "module.")
    tok = root / "context" / "nemo_tokenizer"
    tok.mkdir(parents=True)
    for name, data in vocab_files().items():
        (tok / name.split("_", 1)[1]).write_bytes(data)
    config = {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaConfig", "num_layers": spec["num_layers"],
              "hidden_size": spec["hidden_size"], "ffn_hidden_size": spec["ffn"],
              "num_attention_heads": spec["heads"], "num_query_groups": spec["groups"], "seq_length": spec["max_pos"],
              "position_embedding_type": "rope", "normalization": "RMSNorm", "gated_linear_unit": True,
              "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
              "add_bias_linear": False, "share_embeddings_and_output_weights": False, "layernorm_epsilon": 1e-5,
              "make_vocab_size_divisible_by": 8}
    (root / "context" / "model.yaml").write_text(yaml.safe_dump(
        {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaModel", "config": config}))
    return str(root)


def bert_nemo(bert, tmp_path, tp: int = 1, prefix: str = "model.", new_names: bool = True, drop: str = "") -> str:
    """A NeMo 1 BERT .nemo (BioMegatron layout) of ``bert`` (a ``MegatronBertForPreTraining``): legacy Megatron-LM
    BERT keys under ``prefix`` (``model.``, or the older ``bert_model.`` with ``transformer``/``attention``
    names when ``new_names`` is False), ``mp_rank_0X/`` shards at TP > 1 and the WordPiece vocab.txt packed as
    NeMo packs a tokenizer file (``nemo:<hash>_vocab.txt``)."""
    d = write_bert(bert, str(tmp_path / "mlm"), tp=tp, version=2.0, new_names=new_names)
    shards = {}
    for t in range(tp):
        model = torch.load(os.path.join(d, f"mp_rank_{t:02d}", "model_optim_rng.pt"), weights_only=False)["model"]
        shards["model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"] = \
            flatten_tensors(model, prefix)
    c = bert.config
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(c.vocab_size - 5)]
    cfg = {"num_layers": c.num_hidden_layers, "hidden_size": c.hidden_size, "ffn_hidden_size": c.intermediate_size,
           "num_attention_heads": c.num_attention_heads, "max_position_embeddings": c.max_position_embeddings,
           "encoder_seq_length": c.max_position_embeddings, "num_tokentypes": 2, "bert_binary_head": True,
           "layernorm_epsilon": c.layer_norm_eps, "bias_activation_fusion": False, "activation": "gelu",
           "make_vocab_size_divisible_by": 8, "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1,
           "precision": 16, "megatron_legacy": not new_names,
           "tokenizer": {"library": "megatron", "type": "BertWordPieceLowerCase", "model": None,
                         "vocab_file": "nemo:9f3c_vocab.txt", "merge_file": None}}
    if drop == "weights":
        shards = {}
    return nemo_tar(str(tmp_path / "bert.nemo"), cfg, shards, {"9f3c_vocab.txt": ("\n".join(words) + "\n").encode()})
