"""Tiny Megatron-LM legacy checkpoints written from a Hugging Face reference model, for the reader's tests.

The writer follows the layout of Megatron-LM's ``megatron/training/checkpointing.py`` independently of
``mwb.core.convert.megatron_legacy`` (it starts from Hugging Face names, not mwb's): fused QKV rows in the
order of each ``checkpoint_version``, column-parallel tensors split over TP along rows, row-parallel ones along
columns, the vocabulary padded to ``make_vocab_size_divisible_by × TP``, and pipeline stages numbering their
layers from 0.
"""
from __future__ import annotations

import argparse
import os

import torch


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, version: float) -> torch.Tensor:
    """q/k/v ``[heads·hn, …]`` of one TP shard → the fused tensor in ``version``'s row order."""
    return fuse_rows((q, k, v), heads, version)


def fuse_rows(parts: tuple, heads: int, version: float) -> torch.Tensor:
    """``parts`` (q/k/v, or T5's cross-attention k/v) ``[heads·hn, …]`` of one TP shard → the fused tensor in
    ``version``'s row order (Megatron-LM's ``_transpose_first_dim`` undoes it): 0 ``[n, np, hn]``, 1.0
    ``[np, hn, n]``, ≥ 2 ``[np, n, hn]``."""
    hn = parts[0].shape[0] // heads
    rest = parts[0].shape[1:]
    s = torch.stack([t.reshape(heads, hn, *rest) for t in parts])  # [n, np, hn, ...]
    if version == 0:
        x = s
    elif version == 1.0:
        x = s.permute(1, 2, 0, *range(3, s.dim()))  # [np, hn, n, ...]
    else:
        x = s.transpose(0, 1)  # [np, n, hn, ...]
    return x.reshape(len(parts) * heads * hn, *rest).contiguous()


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] >= rows:
        return t
    pad = torch.randn(rows - t.shape[0], *t.shape[1:], dtype=t.dtype)  # garbage: must be dropped
    return torch.cat([t, pad])


def gpt2_layers(hf) -> list[dict]:
    """Per layer, Megatron-named full tensors (q/k/v kept apart) of a ``GPT2LMHeadModel``."""
    sd = hf.state_dict()
    h = hf.config.n_embd
    out = []
    for i in range(hf.config.n_layer):
        p = f"transformer.h.{i}."
        w, b = sd[p + "attn.c_attn.weight"].t(), sd[p + "attn.c_attn.bias"]
        out.append({"q": (w[:h], b[:h]), "k": (w[h:2 * h], b[h:2 * h]), "v": (w[2 * h:], b[2 * h:]),
                    "input_layernorm": (sd[p + "ln_1.weight"], sd[p + "ln_1.bias"]),
                    "post_attention_layernorm": (sd[p + "ln_2.weight"], sd[p + "ln_2.bias"]),
                    "dense": (sd[p + "attn.c_proj.weight"].t(), sd[p + "attn.c_proj.bias"]),
                    "h_to_4h": (sd[p + "mlp.c_fc.weight"].t(), sd[p + "mlp.c_fc.bias"]),
                    "4h_to_h": (sd[p + "mlp.c_proj.weight"].t(), sd[p + "mlp.c_proj.bias"])})
    return out


def layer_shard(L: dict, t: int, tp: int, heads: int, version: float, attn: str = "attention",
                new_norms: bool = False) -> dict:
    """Megatron state-dict entries (``layers.N.`` prefix left out) of TP rank ``t`` of one layer."""
    chunk = lambda x, dim=0: x.chunk(tp, dim=dim)[t].contiguous()  # noqa: E731
    qkv_w = fuse_qkv(*(chunk(L[n][0]) for n in "qkv"), heads // tp, version)
    qkv_b = fuse_qkv(*(chunk(L[n][1]) for n in "qkv"), heads // tp, version)
    n1, n2 = ("input_norm", "post_attention_norm") if new_norms else ("input_layernorm", "post_attention_layernorm")
    return {f"{n1}.weight": L["input_layernorm"][0], f"{n1}.bias": L["input_layernorm"][1],
            f"{attn}.query_key_value.weight": qkv_w, f"{attn}.query_key_value.bias": qkv_b,
            f"{attn}.dense.weight": chunk(L["dense"][0], 1), f"{attn}.dense.bias": L["dense"][1],
            f"{n2}.weight": L["post_attention_layernorm"][0], f"{n2}.bias": L["post_attention_layernorm"][1],
            "mlp.dense_h_to_4h.weight": chunk(L["h_to_4h"][0]), "mlp.dense_h_to_4h.bias": chunk(L["h_to_4h"][1]),
            "mlp.dense_4h_to_h.weight": chunk(L["4h_to_h"][0], 1), "mlp.dense_4h_to_h.bias": L["4h_to_h"][1]}


def shard_dir(root: str, t: int, p: int, pp: int) -> str:
    name = f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}"
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "model_optim_rng.pt")


def write_tracker(save: str, iteration) -> str:
    d = os.path.join(save, "release" if iteration == "release" else f"iter_{iteration:07d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return d


def write_gpt2(hf, save: str, tp: int = 1, pp: int = 1, version: float = 3.0, iteration="release",
               divisible: int = 8, new_names: bool = False, args_extra: dict | None = None) -> str:
    """A legacy GPT checkpoint of ``hf`` (a ``GPT2LMHeadModel``, tanh gelu) under ``save``; returns its dir."""
    c = hf.config
    d = write_tracker(save, iteration)
    padded = -(-c.vocab_size // (divisible * tp)) * divisible * tp
    args = argparse.Namespace(num_layers=c.n_layer, hidden_size=c.n_embd, num_attention_heads=c.n_head,
                              ffn_hidden_size=4 * c.n_embd, max_position_embeddings=c.n_positions,
                              padded_vocab_size=padded, make_vocab_size_divisible_by=divisible,
                              tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                              layernorm_epsilon=c.layer_norm_epsilon, bias_gelu_fusion=True, openai_gelu=False,
                              tokenizer_type="GPT2BPETokenizer", vocab_file="/somewhere/gpt2-vocab.json",
                              merge_file="/somewhere/gpt2-merges.txt", hidden_dropout=0.1, attention_dropout=0.1)
    for k, v in (args_extra or {}).items():
        setattr(args, k, v)
    sd = hf.state_dict()
    wte = pad_rows(sd["transformer.wte.weight"], padded)
    layers = gpt2_layers(hf)
    per = c.n_layer // pp
    for p in range(pp):
        for t in range(tp):
            emb = {}
            if p == 0:
                emb = {"word_embeddings": {"weight": wte.chunk(tp)[t].clone()},
                       "position_embeddings": {"weight": sd["transformer.wpe.weight"]}}
            body = {}
            for j in range(per):
                for k, v in layer_shard(layers[p * per + j], t, tp, c.n_head, version,
                                        "self_attention" if new_names else "attention", new_names).items():
                    body[f"layers.{j}.{k}"] = v
            if p == pp - 1:
                body["final_layernorm.weight"] = sd["transformer.ln_f.weight"]
                body["final_layernorm.bias"] = sd["transformer.ln_f.bias"]
            lm = {"embedding": emb, ("encoder" if new_names else "transformer"): body}
            model = {"language_model": lm}
            if p == pp - 1 and pp > 1:
                model["word_embeddings_for_head"] = {"weight": wte.chunk(tp)[t].clone()}
            torch.save({"args": args, "checkpoint_version": version, "iteration": 0, "model": model},
                       shard_dir(d, t, p, pp))
    return d


def bert_layers(hf) -> list[dict]:
    """Per layer, Megatron-named full tensors of a ``MegatronBertForPreTraining`` / ``…ForMaskedLM``."""
    sd = hf.state_dict()
    out = []
    for i in range(hf.config.num_hidden_layers):
        p = f"bert.encoder.layer.{i}."
        g = lambda n: (sd[p + n + ".weight"], sd[p + n + ".bias"])  # noqa: E731
        out.append({"q": g("attention.self.query"), "k": g("attention.self.key"), "v": g("attention.self.value"),
                    "input_layernorm": g("attention.ln"), "post_attention_layernorm": g("ln"),
                    "dense": g("attention.output.dense"), "h_to_4h": g("intermediate.dense"),
                    "4h_to_h": g("output.dense")})
    return out


def write_bert(hf, save: str, tp: int = 1, pp: int = 1, version: float = 3.0, iteration=1000,
               divisible: int = 8, new_names: bool = False, lower_case: bool = True) -> str:
    """A legacy BERT checkpoint of ``hf`` (``MegatronBertForPreTraining``, exact gelu) under ``save``."""
    c = hf.config
    d = write_tracker(save, iteration)
    padded = -(-c.vocab_size // (divisible * tp)) * divisible * tp
    args = argparse.Namespace(num_layers=c.num_hidden_layers, hidden_size=c.hidden_size,
                              num_attention_heads=c.num_attention_heads, ffn_hidden_size=c.intermediate_size,
                              max_position_embeddings=c.max_position_embeddings, padded_vocab_size=padded,
                              make_vocab_size_divisible_by=divisible, tensor_model_parallel_size=tp,
                              pipeline_model_parallel_size=pp, layernorm_epsilon=c.layer_norm_eps,
                              bias_gelu_fusion=False, openai_gelu=False, bert_binary_head=True,
                              tokenizer_type="BertWordPieceLowerCase" if lower_case else "BertWordPieceCase",
                              vocab_file="/data/bert-vocab.txt")
    sd = hf.state_dict()
    wte = pad_rows(sd["bert.embeddings.word_embeddings.weight"], padded)
    lm_bias = pad_rows(sd["cls.predictions.bias"], padded)
    layers = bert_layers(hf)
    per = c.num_hidden_layers // pp
    for p in range(pp):
        for t in range(tp):
            lm = {}
            if p == 0:
                lm["embedding"] = {"word_embeddings": {"weight": wte.chunk(tp)[t].clone()},
                                   "position_embeddings": {"weight": sd["bert.embeddings.position_embeddings.weight"]},
                                   "tokentype_embeddings": {"weight": sd["bert.embeddings.token_type_embeddings.weight"]}}
            body = {}
            for j in range(per):
                for k, v in layer_shard(layers[p * per + j], t, tp, c.num_attention_heads, version,
                                        "self_attention" if new_names else "attention", new_names).items():
                    body[f"layers.{j}.{k}"] = v
            model = {"language_model": lm}
            if p == pp - 1:
                body["final_layernorm.weight"] = sd["bert.encoder.ln.weight"]
                body["final_layernorm.bias"] = sd["bert.encoder.ln.bias"]
                lm["pooler"] = {"dense.weight": sd["bert.pooler.dense.weight"], "dense.bias": sd["bert.pooler.dense.bias"]}
                model["lm_head"] = {"bias": lm_bias.chunk(tp)[t].clone(),
                                    "dense": {"weight": sd["cls.predictions.transform.dense.weight"],
                                              "bias": sd["cls.predictions.transform.dense.bias"]},
                                    "layernorm": {"weight": sd["cls.predictions.transform.LayerNorm.weight"],
                                                  "bias": sd["cls.predictions.transform.LayerNorm.bias"]}}
                model["binary_head"] = {"weight": sd["cls.seq_relationship.weight"],
                                        "bias": sd["cls.seq_relationship.bias"]}
            lm["encoder" if new_names else "transformer"] = body
            torch.save({"args": args, "checkpoint_version": version, "iteration": iteration, "model": model},
                       shard_dir(d, t, p, pp))
    return d
