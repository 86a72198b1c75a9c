"""The dense feed-forward block, on its own so that both transformer blocks and MoE shared experts use it."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig


class MLP(nn.Module):
    """GeLU MLP (up → gelu → down) or SwiGLU (silu(gate) · up → down). ``gelu_tanh`` is GPT-2's tanh
    approximation (Hugging Face ``gelu_new``), needed for converted GPT-2 weights to give the same logits."""

    def __init__(self, cfg: ModelConfig, ffn: Optional[int] = None) -> None:
        super().__init__()
        h, f = cfg.hidden_size, ffn or cfg.ffn_size
        self.swiglu = cfg.activation == "swiglu"
        if cfg.activation not in ("gelu", "gelu_tanh", "swiglu", "relu"):
            raise ValueError(f"unknown activation '{cfg.activation}' (gelu | gelu_tanh | swiglu | relu)")
        self.relu = cfg.activation == "relu"
        self.gelu_approximate = "tanh" if cfg.activation == "gelu_tanh" else "none"
        self.up_proj = nn.Linear(h, f, bias=cfg.bias)
        if self.swiglu:
            self.gate_proj = nn.Linear(h, f, bias=cfg.bias)
        self.down_proj = nn.Linear(f, h, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.relu:
            return self.down_proj(F.relu(self.up_proj(x)))
        return self.down_proj(F.gelu(self.up_proj(x), approximate=self.gelu_approximate))
