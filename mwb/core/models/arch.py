"""Which class builds each ``model.arch``, the plain (unparallelised) model for a config, and its size.

Building for a rank — parallel plans, real storage, initialisation — is :func:`mwb.core.compose.build_model`,
above both models and parallelism; this module knows neither. Every built-in family's class takes
``(cfg, vocab_size, padded_vocab_size, layer_ids, pre_process, post_process)``.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import nn

from ..config import ModelConfig
from .bert import BertModel
from .gpt import GPTModel
from .moe import MoELayer
from .t5 import T5Model
from .transformer import padded_vocab_size

# arch → constructor(cfg, vocab_size, padded_vocab_size, layer_ids, pre_process, post_process)
ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {"gpt": GPTModel, "bert": BertModel, "t5": T5Model}


def model_constructor(name: str) -> Callable[..., nn.Module]:
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown model arch '{name}' (known: {', '.join(sorted(ARCHITECTURES))})")
    return ARCHITECTURES[name]


def make_model(cfg: ModelConfig, vocab_size: int, padded_vocab_size: int,
               layer_ids: Optional[Sequence[int]] = None, pre_process: bool = True,
               post_process: bool = True) -> nn.Module:
    """The plain model (or pipeline stage) of ``cfg.arch`` on the current default device."""
    return model_constructor(cfg.arch)(cfg, vocab_size, padded_vocab_size, layer_ids, pre_process, post_process)


def count_parameters(model: nn.Module) -> int:
    """Parameters of ``model``, each shared (tied) tensor counted once."""
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def count_params(model_cfg: ModelConfig, vocab_size: int) -> dict[str, int]:
    """Total parameters and parameters active per token (router, shared expert and k of the E experts
    of each MoE layer; everything else is dense), for the single-process model with a padded vocabulary.
    Built on the meta device: exact for any architecture, and allocates nothing."""
    padded = padded_vocab_size(vocab_size, model_cfg.make_vocab_size_divisible_by, 1)
    with torch.device("meta"):
        model = make_model(model_cfg, vocab_size, padded)
    total = count_parameters(model)
    inactive = 0
    for m in model.modules():
        if isinstance(m, MoELayer):
            per_expert = sum(p.numel() for p in m.experts.parameters()) // m.num_experts
            inactive += (m.num_experts - m.top_k) * per_expert
    return {"total": total, "active": total - inactive}
