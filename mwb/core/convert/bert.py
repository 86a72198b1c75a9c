"""BERT (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``) ↔ mwb BERT in its post-norm layout.

Hugging Face BERT normalises after each residual sum and on the embeddings, which is mwb's
``model.bert_post_norm`` variant (:mod:`mwb.core.models.bert`): ``attention.output.LayerNorm`` → ``ln1``,
``output.LayerNorm`` → ``ln2``, ``embeddings.LayerNorm`` → ``embed_norm``, no final norm. The MLM head is
``cls.predictions.transform`` (dense, gelu, LayerNorm) → ``lm_transform`` plus the tied decoder with its
own bias (``cls.predictions.bias`` → ``head.bias``). ``BertForPreTraining``'s pooler and next-sentence
head become ``pooler`` / ``binary_classifier`` (``bert_binary_head``); exporting a model that has them writes a
``BertForPreTraining``, otherwise a ``BertForMaskedLM``.

The heads a checkpoint has are read from its weights, not its ``architectures``. A plain ``BertModel``
(sentence-transformers, all-MiniLM-L6-v2, most encoder checkpoints) has no MLM head: it converts to
``bert_lm_head: false`` (the mwb model has no head to pretend was trained) with its pooler, if it has one,
as ``bert_pooler``; fine-tuning and retrieval use it as an encoder, and exporting it writes a
``BertModel`` again. Megatron's pre-norm BERT has no Hugging Face counterpart and is refused.
"""
from __future__ import annotations

from .hf_io import ConversionError, strip_prefix, take

NAME = "bert"
ARCHITECTURE = "BertForMaskedLM"


def matches_hf(hf: dict) -> bool:
    return hf.get("model_type") == "bert"


def matches_mwb(m: dict) -> bool:
    return m["arch"] == "bert"


def model_config(hf: dict) -> dict:
    if hf.get("hidden_act", "gelu") != "gelu":
        raise ConversionError(f"BERT activation '{hf.get('hidden_act')}' is not supported (gelu)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError("only absolute position embeddings are supported for BERT")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ConversionError("BERT as a decoder has no mwb equivalent")
    archs = hf.get("architectures") or []
    return {"arch": "bert", "bert_post_norm": True, "num_layers": hf["num_hidden_layers"],
            "hidden_size": hf["hidden_size"], "num_attention_heads": hf["num_attention_heads"],
            "num_query_groups": None, "ffn_hidden_size": hf["intermediate_size"], "kv_channels": None,
            "vocab_size": hf["vocab_size"], "max_position_embeddings": hf["max_position_embeddings"],
            "num_tokentypes": hf.get("type_vocab_size", 2), "normalization": "layernorm",
            "norm_eps": hf.get("layer_norm_eps", 1e-12), "activation": "gelu", "position_embedding": "learned",
            "dropout": hf.get("hidden_dropout_prob", 0.1),
            "attention_dropout": hf.get("attention_probs_dropout_prob", 0.1), "bias": True,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "bert_binary_head": "BertForPreTraining" in archs, "init_std": hf.get("initializer_range", 0.02)}


def _rename_legacy(sd: dict) -> dict:
    """Original TF-converted checkpoints name LayerNorm parameters gamma/beta."""
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
            for k, v in sd.items()}


def layer_pairs(i: int, hf_prefix: str = "bert."):
    """(Hugging Face name, mwb name) of every parameter of encoder layer ``i``; ``hf_prefix`` is ``"bert."``
    inside a ``BertFor*`` model and ``""`` in a bare ``BertModel``."""
    p, q = f"{hf_prefix}encoder.layer.{i}.", f"layers.{i}."
    for a, b in (("attention.self.query", "attn.q_proj"), ("attention.self.key", "attn.k_proj"),
                 ("attention.self.value", "attn.v_proj"), ("attention.output.dense", "attn.o_proj"),
                 ("attention.output.LayerNorm", "ln1"), ("intermediate.dense", "mlp.up_proj"),
                 ("output.dense", "mlp.down_proj"), ("output.LayerNorm", "ln2")):
        for s in ("weight", "bias"):
            yield p + f"{a}.{s}", q + f"{b}.{s}"


_EMBED = (("bert.embeddings.word_embeddings.weight", "embed.word.weight"),
          ("bert.embeddings.position_embeddings.weight", "embed.position.weight"),
          ("bert.embeddings.token_type_embeddings.weight", "embed.tokentype.weight"),
          ("bert.embeddings.LayerNorm.weight", "embed_norm.weight"),
          ("bert.embeddings.LayerNorm.bias", "embed_norm.bias"))
_LM = (("cls.predictions.transform.dense.weight", "lm_transform.dense.weight"),
       ("cls.predictions.transform.dense.bias", "lm_transform.dense.bias"),
       ("cls.predictions.transform.LayerNorm.weight", "lm_transform.norm.weight"),
       ("cls.predictions.transform.LayerNorm.bias", "lm_transform.norm.bias"),
       ("cls.predictions.bias", "head.bias"))
_POOLER = (("bert.pooler.dense.weight", "pooler.dense.weight"), ("bert.pooler.dense.bias", "pooler.dense.bias"))
_BINARY = (("cls.seq_relationship.weight", "binary_classifier.weight"),
           ("cls.seq_relationship.bias", "binary_classifier.bias"))  # the model's name (models/bert.py)


def _pairs(m: dict) -> list:
    """(HF name inside a ``BertFor*`` model, mwb name) of every tensor the mwb model ``m`` has."""
    lm, binary = m.get("bert_lm_head", True), m["bert_binary_head"]
    out = list(_EMBED) + (list(_LM) if lm else []) + (list(_POOLER) if binary or m.get("bert_pooler") else [])
    out += list(_BINARY) if binary else []
    for i in range(m["num_layers"]):
        out += list(layer_pairs(i))
    if lm and not m["tie_embeddings"]:
        out.append(("cls.predictions.decoder.weight", "head.weight"))
    return out


def to_mwb(sd: dict, m: dict) -> dict:
    """HF tensors → mwb tensors. The heads present decide the model (``m`` is updated): a plain
    ``BertModel`` (no ``cls.predictions``) becomes ``bert_lm_head: false`` with its pooler if it has one;
    task heads of ``BertFor{SequenceClassification,…}`` (``classifier``, ``qa_outputs``) are left out."""
    sd = _rename_legacy(sd)
    sd = strip_prefix({k: v for k, v in sd.items() if not k.startswith("cls.")}, "bert.") | \
        {k: v for k, v in sd.items() if k.startswith("cls.")}
    if "cls.predictions.bias" not in sd and "cls.predictions.decoder.bias" in sd:
        sd["cls.predictions.bias"] = sd["cls.predictions.decoder.bias"]
    m["bert_lm_head"] = "cls.predictions.transform.dense.weight" in sd
    m["bert_binary_head"] = "cls.seq_relationship.weight" in sd
    m["bert_pooler"] = not m["bert_binary_head"] and "bert.pooler.dense.weight" in sd
    if not m["bert_lm_head"]:
        m["tie_embeddings"] = True  # nothing to tie; keeps the embedding one tensor in every layout
    where = "BERT checkpoint"
    return {b: take(sd, a, where) for a, b in _pairs(m)}


def check_mwb(m: dict) -> None:
    if not m.get("bert_post_norm"):
        raise ConversionError("this BERT uses Megatron's pre-norm layout, which Hugging Face BERT cannot "
                              "express; train with model.bert_post_norm=true to export")
    if m["activation"] != "gelu" or not m["bias"] or m["position_embedding"] != "learned":
        raise ConversionError("Hugging Face BERT needs activation gelu, biases and learned positions")


def architecture(m: dict) -> str:
    if not m.get("bert_lm_head", True):
        return "BertForNextSentencePrediction" if m["bert_binary_head"] else "BertModel"
    return "BertForPreTraining" if m["bert_binary_head"] else ARCHITECTURE


def hf_config(m: dict, vocab: int, base: dict) -> dict:
    cfg = dict(base)
    cfg.update({"architectures": [architecture(m)],
                "model_type": "bert", "vocab_size": vocab, "hidden_size": m["hidden_size"],
                "num_hidden_layers": m["num_layers"], "num_attention_heads": m["num_attention_heads"],
                "intermediate_size": m["ffn_hidden_size"] or 4 * m["hidden_size"], "hidden_act": "gelu",
                "max_position_embeddings": m["max_position_embeddings"], "type_vocab_size": m["num_tokentypes"],
                "layer_norm_eps": m["norm_eps"], "hidden_dropout_prob": m["dropout"],
                "attention_probs_dropout_prob": m["attention_dropout"] if m["attention_dropout"] is not None
                else m["dropout"], "tie_word_embeddings": m["tie_embeddings"],
                "position_embedding_type": "absolute", "initializer_range": m["init_std"]})
    return cfg


def to_hf(sd: dict, m: dict) -> dict:
    """mwb tensors → HF names; a plain ``BertModel`` (no heads) has no ``bert.`` prefix."""
    check_mwb(m)
    out = {a: sd[b] for a, b in _pairs(m)}
    if architecture(m) == "BertModel":
        out = {a[len("bert."):]: t for a, t in out.items()}
    return out
