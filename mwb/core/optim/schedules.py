"""Learning-rate schedules: linear warm-up, then cosine, linear, constant, or warmup-stable-decay (WSD).

``lr_at(step)`` takes the 0-based index of the optimizer step about to run, so step 0 of a run with
warm-up uses lr/warmup, and the value depends on nothing but the step (exact on resume).
"""
from __future__ import annotations

import math

from ..config import OptimConfig


def lr_at(step: int, cfg: OptimConfig, total_steps: int) -> float:
    decay_steps = cfg.decay_steps or total_steps
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if cfg.lr_schedule == "wsd":
        decay_len = max(int(round(cfg.wsd_decay_fraction * decay_steps)), 1)
        start = decay_steps - decay_len
        if step < start:
            return cfg.lr
        frac = min((step - start) / decay_len, 1.0)
        return cfg.lr - (cfg.lr - cfg.min_lr) * frac
    span = max(decay_steps - cfg.warmup_steps, 1)
    frac = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    if cfg.lr_schedule == "cosine":
        return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * frac))
    if cfg.lr_schedule == "linear":
        return cfg.lr - (cfg.lr - cfg.min_lr) * frac
    raise ValueError(f"unknown lr schedule '{cfg.lr_schedule}' (cosine | linear | constant | wsd)")
