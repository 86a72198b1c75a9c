"""The dense feed-forward block, on its own so that both transformer blocks and MoE shared experts use it."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .main_grad import linear

ACTIVATIONS = ("gelu", "gelu_tanh", "swiglu", "relu", "geglu_tanh")
GATED = ("swiglu", "geglu_tanh")  # act(gate) · up


class MLP(nn.Module):
    """GeLU/ReLU MLP (up → act → down) or a gated one: SwiGLU (silu(gate) · up → down) and ``geglu_tanh``
    (tanh-gelu(gate) · up, T5 v1.1's "gated-gelu"). ``gelu_tanh`` is GPT-2's tanh approximation (Hugging
    Face ``gelu_new``), needed for converted GPT-2 (and T5 v1.1) weights to give the same logits."""

    def __init__(self, cfg: ModelConfig, ffn: Optional[int] = None) -> None:
        super().__init__()
        h, f = cfg.hidden_size, ffn or cfg.ffn_size
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation '{cfg.activation}' ({' | '.join(ACTIVATIONS)})")
        self.gated = cfg.activation in GATED
        self.swiglu = cfg.activation == "swiglu"
        self.relu = cfg.activation == "relu"
        self.gelu_approximate = "tanh" if cfg.activation in ("gelu_tanh", "geglu_tanh") else "none"
        self.up_proj = nn.Linear(h, f, bias=cfg.bias)
        if self.gated:
            self.gate_proj = nn.Linear(h, f, bias=cfg.bias)
        self.down_proj = nn.Linear(f, h, bias=cfg.bias)

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return F.silu(x)
        if self.relu:
            return F.relu(x)
        return F.gelu(x, approximate=self.gelu_approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return linear(self.down_proj, self._act(linear(self.gate_proj, x)) * linear(self.up_proj, x))
        return linear(self.down_proj, self._act(linear(self.up_proj, x)))
