"""Dynamic loss scaling for fp16 (Megatron's DynamicGradScaler).

The loss is multiplied by ``scale`` before backward so small fp16 gradients do not flush to zero. A step
whose gradients contain inf/NaN is skipped and counted; after ``hysteresis`` such steps the scale halves
(never below ``min_scale``); after ``growth_interval`` clean steps in a row it doubles. bf16 and fp32 use a
constant scale of 1.
"""
from __future__ import annotations


class LossScaler:
    def __init__(self, initial: float = 2.0**16, min_scale: float = 1.0, growth_interval: int = 1000,
                 hysteresis: int = 2, dynamic: bool = True) -> None:
        self.scale = float(initial) if dynamic else 1.0
        self.min_scale, self.growth_interval, self.hysteresis = min_scale, growth_interval, hysteresis
        self.dynamic = dynamic
        self._clean = 0
        self._hysteresis_left = hysteresis
        self.skipped = 0

    def update(self, found_inf: bool) -> None:
        if not self.dynamic:
            return
        if found_inf:
            self.skipped += 1
            self._clean = 0
            self._hysteresis_left -= 1
            if self._hysteresis_left <= 0:
                self.scale = max(self.scale / 2.0, self.min_scale)
                self._hysteresis_left = self.hysteresis
        else:
            self._clean += 1
            if self._clean >= self.growth_interval:
                self.scale *= 2.0
                self._clean = 0
                self._hysteresis_left = self.hysteresis

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean": self._clean, "hysteresis_left": self._hysteresis_left,
                "skipped": self.skipped}

    def load_state_dict(self, sd: dict) -> None:
        self.scale, self._clean = sd["scale"], sd["clean"]
        self._hysteresis_left, self.skipped = sd["hysteresis_left"], sd["skipped"]
