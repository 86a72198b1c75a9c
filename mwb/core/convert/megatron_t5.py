"""megatron-core T5 checkpoints (``--ckpt-format torch`` at any TP, PP 1, and ``torch_dist``) → mwb T5 tensors and config.

megatron-core 0.16's ``T5Model`` state dict (names printed from it with the local encoder/decoder specs):
``embedding.word_embeddings`` / ``embedding.position_embeddings`` (the latter also at the top level as
``position_embeddings.weight``, an alias), ``encoder.layers.N.*`` and ``decoder.layers.N.*`` with
``input_layernorm``, ``self_attention.linear_qkv`` (rows ``[np, 3, hn]`` per TP shard), ``linear_proj``,
``pre_mlp_layernorm``, ``mlp.linear_fc1`` / ``linear_fc2``; the decoder also ``pre_cross_attn_layernorm``,
``cross_attention.linear_q``, ``cross_attention.linear_kv`` (rows ``[np, 2, hn]`` per shard) and
``cross_attention.linear_proj``. ``linear_qkv.layer_norm_*`` / ``linear_fc1.layer_norm_*`` (the norm fused into
the linear: Transformer Engine, and ``torch_dist``'s names) are read as ``input_layernorm`` / ``pre_mlp_layernorm``.
``encoder.final_layernorm`` / ``decoder.final_layernorm`` exist only with
Transformer Engine's spec (the local spec's blocks have none: ``t5_final_norm: false``). The head is
``lm_head.output_layer`` (aliased as ``output_layer``): its ``weight`` when untied; when tied
(Megatron's default) a vocab-parallel ``bias`` only, which mwb's T5 holds as ``head.bias`` (``t5_head_bias``).
megatron-core does not rescale the decoder output before the head, so ``t5_scale_decoder_output`` is False.

Relative positions need megatron-core's Transformer Engine attention (no CPU reference to check a mapping
against) and T5 pipeline stages split encoder and decoder in a way of their own: both are refused. (Megatron-LM
removed T5 pipeline parallelism in b600e38d7b, "M4 Taskforce: Remove Encoder PP related Functions", 2025-07:
``pretrain_t5.py`` raises "Pipeline parallelism is not supported for T5"; the older runs placed encoder layers on
the first ``encoder_pipeline_model_parallel_size`` / ``pipeline_model_parallel_split_rank`` stages and decoder
layers on the rest, a layout with no megatron-core reference left to test a reader against.)
"""
from __future__ import annotations

import re

import torch

from . import megatron_core
from .hf_io import ConversionError

_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")
# megatron-core layer tensor → (mwb name, how its TP shards merge: cat rows / cat columns / replicated)
_SIMPLE = {"input_layernorm": ("ln1", None), "pre_mlp_layernorm": ("ln2", None),
           "pre_cross_attn_layernorm": ("ln_cross", None),
           "self_attention.linear_proj": ("attn.o_proj", 1), "mlp.linear_fc1": ("mlp.up_proj", 0),
           "mlp.linear_fc2": ("mlp.down_proj", 1), "cross_attention.linear_q": ("cross_attn.q_proj", 0),
           "cross_attention.linear_proj": ("cross_attn.o_proj", 1)}
# the norm fused into the next linear (Transformer Engine's layout, and megatron-core's sharded_state_dict names
# in torch_dist checkpoints) → the separate norm's name
_FUSED_NORMS = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
                "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
                "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
                "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias"}
_TOP = ("embedding.word_embeddings.weight", "embedding.position_embeddings.weight", "position_embeddings.weight",
        "encoder.final_layernorm.weight", "encoder.final_layernorm.bias", "decoder.final_layernorm.weight",
        "decoder.final_layernorm.bias", "lm_head.output_layer.weight", "lm_head.output_layer.bias",
        "output_layer.weight", "output_layer.bias")  # the last two: aliases of lm_head.output_layer.*


def is_t5(model: dict) -> bool:
    """Whether a flat megatron-core state dict is a T5Model's (its decoder has cross-attention)."""
    return any(isinstance(k, str) and ".cross_attention." in k for k in model)


def tensors(model: dict, where: str) -> dict:
    """The tensors of one shard's T5 state dict (``_extra_state`` dropped), every name checked."""
    out = {}
    for k, v in megatron_core.weights(model):
        m = _LAYER.match(k)
        if m and m.group(3) in _FUSED_NORMS:
            k = f"{m.group(1)}.layers.{m.group(2)}.{_FUSED_NORMS[m.group(3)]}"
            m = _LAYER.match(k)
        base, s = m.group(3).rsplit(".", 1) if m else (None, None)
        if not (k in _TOP or m and s in ("weight", "bias") and (
                base in _SIMPLE or base in ("self_attention.linear_qkv", "cross_attention.linear_kv"))):
            raise ConversionError(f"{where}: unexpected megatron-core T5 tensor '{k}'")
        out[k] = v
    return out


def _split_rows(t: torch.Tensor, heads: int, parts: int) -> list:
    """A shard's fused rows ``[np, parts, hn]`` → ``parts`` tensors ``[np·hn, …]``."""
    rest = t.shape[1:]
    x = t.view(heads, parts, t.shape[0] // (heads * parts), *rest)
    return [x[:, j].reshape(-1, *rest) for j in range(parts)]


def _layer(kind: str, shards: list, heads: int) -> dict:
    """mwb names (after ``{side}.layers.{i}.``) → merged tensor, for one layer tensor's TP shards."""
    base, s = kind.rsplit(".", 1)
    if base in ("self_attention.linear_qkv", "cross_attention.linear_kv"):
        names = ("attn.q_proj", "attn.k_proj", "attn.v_proj") if base.startswith("self") else \
            ("cross_attn.k_proj", "cross_attn.v_proj")
        split = [_split_rows(t, heads // len(shards), len(names)) for t in shards]
        return {f"{n}.{s}": torch.cat([x[j] for x in split]) for j, n in enumerate(names)}
    name, dim = _SIMPLE[base]
    if dim == 1 and s == "bias":  # a row-parallel bias is whole on every rank
        dim = None
    return {f"{name}.{s}": shards[0] if dim is None else torch.cat(shards, dim=dim)}


def check_positions(args, d: str) -> None:
    """Refuse every position type but learned absolute ones, before the generic args checks name them."""
    pos = getattr(args, "position_embedding_type", None) or "learned_absolute"
    if pos != "learned_absolute":
        raise ConversionError(f"{d}: megatron-core T5 with position_embedding_type '{pos}' is not supported "
                              f"(learned_absolute only: relative positions need Transformer Engine)")


def stack_depth(args, side: str, default):
    """Layers of a T5's ``side`` ("encoder" / "decoder") stack: megatron-core's ``encoder_num_layers`` /
    ``decoder_num_layers`` when the args set it, else ``num_layers`` (``default``)."""
    return getattr(args, f"{side}_num_layers", None) or default


def assemble(args, stages: list, d: str, vocab_size, base: dict) -> tuple:
    """(mwb model config, vocab, {mwb name: tensor}) of ``stages[p][t]`` (:func:`tensors` of each shard);
    ``base`` is the GPT-style config the legacy reader derives from ``args`` (sizes, norm, activation)."""
    if len(stages) != 1:
        raise ConversionError(f"{d}: megatron-core T5 checkpoints with pipeline parallelism are not supported "
                              f"(Megatron-LM's pretrain_t5.py refuses T5 pipeline stages since 2025)")
    check_positions(args, d)
    row = stages[0]
    sd = row[0]
    count = lambda side: len({int(m.group(2)) for m in map(_LAYER.match, sd) if m and m.group(1) == side})  # noqa: E731
    n_enc, n_dec = count("encoder"), count("decoder")
    for side, n in (("encoder", n_enc), ("decoder", n_dec)):
        want = stack_depth(args, side, base["num_layers"])
        if n != want:
            raise ConversionError(f"{d}: the checkpoint holds {n} {side} layers but its args say {want}")
    norms = {side: f"{side}.final_layernorm.weight" in sd for side in ("encoder", "decoder")}
    if norms["encoder"] != norms["decoder"]:
        raise ConversionError(f"{d}: a final layernorm on one T5 stack only has no mwb equivalent")
    tied = base["tie_embeddings"]
    m = {k: v for k, v in base.items() if not k.startswith("bert_") and k != "num_tokentypes"}
    m.update(arch="t5", num_layers=n_enc, num_decoder_layers=n_dec, t5_scale_decoder_output=False,
             t5_final_norm=norms["encoder"], t5_head_bias="lm_head.output_layer.bias" in sd)
    heads = m["num_attention_heads"]
    if heads % len(row):
        raise ConversionError(f"{d}: {heads} heads do not split over TP {len(row)}")

    def shards(name):
        try:
            return [r[name] for r in row]
        except KeyError:
            raise ConversionError(f"{d}: tensor {name} is missing from a TP shard") from None

    def get(name, dim=0):
        return shards(name)[0] if dim is None else torch.cat(shards(name), dim=dim)
    out = {}
    for name in sorted(k for k in sd if _LAYER.match(k)):
        side, i, kind = _LAYER.match(name).groups()
        for k, t in _layer(kind, shards(name), heads).items():
            out[f"{side}.layers.{i}.{k}"] = t
    padded = get("embedding.word_embeddings.weight")
    vocab = padded.shape[0] if vocab_size is None else int(vocab_size)
    if vocab > padded.shape[0]:
        raise ConversionError(f"{d}: the tokenizer has {vocab} tokens but the embedding only {padded.shape[0]} rows")
    out["embed.word.weight"] = padded[:vocab].clone()
    out["embed.position.weight"] = get("embedding.position_embeddings.weight", None)
    if m["t5_final_norm"]:
        for side in ("encoder", "decoder"):
            for s in ("weight", "bias") if m["normalization"] == "layernorm" else ("weight",):
                out[f"{side}.norm.{s}"] = get(f"{side}.final_layernorm.{s}", None)
    if not tied:
        out["head.weight"] = get("lm_head.output_layer.weight")[:vocab].clone()
    if m["t5_head_bias"]:
        out["head.bias"] = get("lm_head.output_layer.bias")[:vocab].clone()
    m["vocab_size"] = vocab
    return m, vocab, out
