"""The megatron-core layer layout shared by the GPT, BERT and T5 writers (:mod:`.megatron_write`,
:mod:`.megatron_write_bert_t5`): mwb's per-layer names → megatron-core's stacked ``decoder.layers.*`` keys, the
fused QKV / cross-attention KV rows, the padded vocabulary and the ``_extra_state`` entries megatron-core's
loader asks for. Kept apart so that both writers import it and neither imports the other."""
from __future__ import annotations

import torch

from ..models.transformer import padded_vocab_size

_LAYER = {"ln1.weight": "self_attention.linear_qkv.layer_norm_weight",
          "ln1.bias": "self_attention.linear_qkv.layer_norm_bias",
          "attn.o_proj.weight": "self_attention.linear_proj.weight",
          "attn.o_proj.bias": "self_attention.linear_proj.bias",
          "ln2.weight": "mlp.linear_fc1.layer_norm_weight", "ln2.bias": "mlp.linear_fc1.layer_norm_bias",
          "mlp.down_proj.weight": "mlp.linear_fc2.weight", "mlp.down_proj.bias": "mlp.linear_fc2.bias"}

def padder(m, vocab: int):
    """(padded vocabulary, a function padding a vocab-row tensor with zero rows to it)."""
    padded = padded_vocab_size(vocab, m.make_vocab_size_divisible_by, 1)

    def pad(t):
        return torch.cat([t, t.new_zeros(padded - t.shape[0], *t.shape[1:])]) if padded > t.shape[0] else t
    return padded, pad

def fuse_rows(parts: list, groups: int, hn: int) -> torch.Tensor:
    """q/k/v-like tensors (``[n·hn, …]`` each, n a multiple of ``groups``) → megatron-core's group-major fused
    rows ``[groups, Σ n/groups, hn]``: linear_qkv (q, k, v) and T5's cross-attention linear_kv (k, v)."""
    rest = parts[0].shape[1:]
    return torch.cat([t.reshape(groups, -1, hn, *rest) for t in parts], dim=1).reshape(-1, *rest)

def stack_layers(m, tensors: dict, src: str, dst: str, n: int, names: dict = _LAYER) -> dict:
    """{``{dst}.layers.X``: ``[n, …]``} of the mwb layers ``{src}layers.{i}.*`` (i < n): ``names`` maps the
    one-to-one tensors, the fused QKV and ``linear_fc1`` are built here (T5's cross-attention is in ``names``
    for its q/o and added by its caller's own fused ``linear_kv``)."""
    groups, hn = m.query_groups, m.head_dim
    stacks: dict = {}
    for i in range(n):
        p = f"{src}layers.{i}."
        for a, b in names.items():
            if p + a in tensors:
                stacks.setdefault(b, []).append(tensors[p + a])
        for s in ("weight", "bias"):
            if p + f"attn.q_proj.{s}" not in tensors:
                continue
            qkv = [tensors[p + f"attn.{x}_proj.{s}"] for x in "qkv"]
            stacks.setdefault(f"self_attention.linear_qkv.{s}", []).append(fuse_rows(qkv, groups, hn))
            if p + f"cross_attn.k_proj.{s}" in tensors:
                kv = [tensors[p + f"cross_attn.{x}_proj.{s}"] for x in "kv"]
                stacks.setdefault(f"cross_attention.linear_kv.{s}", []).append(fuse_rows(kv, groups, hn))
            fc1 = [tensors[p + f"mlp.up_proj.{s}"]]
            if m.activation == "swiglu":
                fc1 = [tensors[p + f"mlp.gate_proj.{s}"]] + fc1
            stacks.setdefault(f"mlp.linear_fc1.{s}", []).append(torch.cat(fc1))
    return {f"{dst}.layers.{k}": torch.stack(ts).contiguous() for k, ts in stacks.items()}

EXTRA_STATE_MODULES = ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")

def extra_states(layers: int, block: str = "decoder", modules: tuple = EXTRA_STATE_MODULES) -> dict:
    """The per-layer ``_extra_state`` objects megatron-core's loader asks for (Transformer Engine / FP8
    metadata; ``None`` for a model without FP8), under its ``ShardedObject`` keys ``…/shard_{i}_{L}``."""
    out = {}
    for mod in modules:
        for i in range(layers):
            # DCP torch.saves a non-tensor value as a byte item; megatron-core's is the list of a key's objects
            out[f"{block}.layers.{mod}._extra_state/shard_{i}_{layers}"] = [None]
    return out
