"""Row layouts shared by the legacy Megatron readers (:mod:`.megatron_legacy` for GPT/BERT,
:mod:`.megatron_legacy_t5`): a nested state dict flattened to dotted names, and a fused QKV (or T5's
cross-attention ``key_value``) split by ``checkpoint_version``. Kept apart so that both readers import it and
neither imports the other."""
from __future__ import annotations

import torch

from .hf_io import ConversionError

def flatten_tensors(tree: dict, prefix: str = "") -> dict:
    """The tensors of a nested state dict under dotted names (``{"a": {"b": t}}`` → ``{"a.b": t}``)."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten_tensors(v, f"{prefix}{k}."))
        elif isinstance(v, torch.Tensor):
            out[prefix + k] = v
    return out

def _split_qkv(t: torch.Tensor, version: float, heads: int, where: str, groups: int = 0, parts: int = 3) -> tuple:
    """A TP shard's fused QKV (weight ``[(np + 2·ng)·hn, h]`` or bias) → (q ``[np·hn, …]``, k, v ``[ng·hn, …]``);
    ``groups`` (ng) < ``heads`` (np) is grouped-query attention, whose rows are ``[ng, np/ng + 2, hn]``.
    ``parts`` 2: T5's cross-attention ``key_value`` (→ k, v), whose rows follow the same versions."""
    rest = t.shape[1:]
    groups = groups or heads
    if groups != heads:
        if version < 2.0:
            raise ConversionError(f"{where}: grouped-query attention with checkpoint_version {version} < 2")
        per = heads // groups
        hn = t.shape[0] // (heads + 2 * groups)
        x = t.view(groups, per + 2, hn, *rest)
        return (x[:, :per].reshape(heads * hn, *rest), x[:, per].reshape(groups * hn, *rest),
                x[:, per + 1].reshape(groups * hn, *rest))
    hn = t.shape[0] // (parts * heads)
    if version == 0.0:
        x = t.view(parts, heads, hn, *rest).transpose(0, 1)
    elif version == 1.0:
        x = t.view(heads, hn, parts, *rest).transpose(1, 2)
    elif version >= 2.0:
        x = t.view(heads, parts, hn, *rest)
    else:
        raise ConversionError(f"{where}: checkpoint_version {version} is not one mwb knows (0, 1.0, ≥ 2.0)")
    return tuple(x[:, j].reshape(heads * hn, *rest) for j in range(parts))
