"""Batch-size ramp-up: Megatron's ``--rampup-batch-size START INCREMENT SAMPLES``.

The global batch starts at START and grows by INCREMENT every ``SAMPLES / ((G − START) / INCREMENT)``
consumed samples until it reaches the configured global batch G (MT-NLG 530B ramped 32 → 1,920 over about
12B tokens). As in Megatron-LM's ``RampupBatchsizeNumMicroBatchesCalculator``, the size of the next step is
a function of the samples consumed so far only: once more than SAMPLES were consumed it is G, before that
``START + ⌊consumed / per_increment⌋ · INCREMENT``. So a resumed run needs nothing but the consumed-sample
count to continue the schedule, and every layout walks the same schedule. Micro-batches per step follow
(``size / (micro · dp)``), which is why every size must be divisible by micro-batch × data-parallel size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ..config import ConfigError


@dataclass(frozen=True)
class BatchRampup:
    start: int
    increment: int
    samples: int
    global_batch_size: int

    @classmethod
    def from_config(cls, rampup: Optional[Sequence], global_batch_size: int) -> Optional["BatchRampup"]:
        """The schedule ``train.rampup_batch_size`` describes, None when it is unset; a ConfigError for
        values Megatron would refuse (START above G, G − START not a multiple of INCREMENT, ...)."""
        if rampup is None:
            return None
        if len(rampup) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in rampup):
            raise ConfigError(f"--rampup-batch-size takes three integers START INCREMENT SAMPLES, got {list(rampup)}")
        start, inc, samples = (int(v) for v in rampup)
        if start <= 0 or inc <= 0 or samples <= 0:
            raise ConfigError(f"--rampup-batch-size {start} {inc} {samples}: START, INCREMENT and SAMPLES must be "
                              f"positive")
        if start >= global_batch_size:
            raise ConfigError(f"--rampup-batch-size START {start} must be smaller than the global batch size "
                              f"{global_batch_size} it ramps up to")
        if (global_batch_size - start) % inc:
            raise ConfigError(f"--rampup-batch-size: global batch size {global_batch_size} − START {start} = "
                              f"{global_batch_size - start} is not a multiple of INCREMENT {inc}")
        return cls(start, inc, samples, global_batch_size)

    @property
    def increments(self) -> int:
        return (self.global_batch_size - self.start) // self.increment

    @property
    def samples_per_increment(self) -> float:
        return self.samples / self.increments

    def sizes(self) -> list[int]:
        """Every global batch size the schedule visits, START to G."""
        return list(range(self.start, self.global_batch_size + 1, self.increment))

    def batch_size(self, consumed: int) -> int:
        """The global batch of the step that starts after ``consumed`` samples (Megatron's ``update``)."""
        if consumed > self.samples:
            return self.global_batch_size
        size = self.start + int(consumed / self.samples_per_increment) * self.increment
        return min(size, self.global_batch_size)

    def check_divisible(self, micro_batch: int, dp: int) -> None:
        """Every size must split into whole micro-batches on every data-parallel rank."""
        unit = micro_batch * dp
        bad = [s for s in (self.start, self.increment) if s % unit]
        if bad:
            raise ConfigError(f"--rampup-batch-size {self.start} {self.increment} {self.samples}: START and INCREMENT "
                              f"must be multiples of micro-batch size × data-parallel size = {micro_batch} × {dp}, "
                              f"so that every global batch of the ramp splits into whole micro-batches")

    def consumed_after(self, steps: int) -> int:
        """Samples consumed by the first ``steps`` steps."""
        consumed = 0
        for b, n in self.phases(steps=steps):
            consumed += b * n
        return consumed

    def phases(self, steps: Optional[int] = None, total_samples: Optional[float] = None) -> list[tuple[int, int]]:
        """``[(global batch size, steps at that size)]`` in order, for the first ``steps`` steps or until
        ``total_samples`` are consumed. Whole phases are jumped over (a 1T-token plan has ~10⁶ steps), then
        checked against :meth:`batch_size` so the boundaries are exactly the step-by-step ones."""
        if steps is None and total_samples is None:
            raise ValueError("phases() needs steps or total_samples")
        out: list[tuple[int, int]] = []
        consumed, done = 0, 0
        while (steps is None or done < steps) and (total_samples is None or consumed < total_samples):
            b = self.batch_size(consumed)
            left = math.inf
            if steps is not None:
                left = steps - done
            if total_samples is not None:
                left = min(left, math.ceil((total_samples - consumed) / b))
            if b == self.global_batch_size:
                n = int(left)
            else:
                n = self._steps_at(consumed, b, int(min(left, 2**62)))
            out.append((b, n))
            consumed += b * n
            done += n
        return out

    def _steps_at(self, consumed: int, b: int, cap: int) -> int:
        """Steps of size ``b`` from ``consumed`` before the size changes (at most ``cap``)."""
        index = (b - self.start) // self.increment
        boundary = min((index + 1) * self.samples_per_increment, self.samples + 1)
        n = max(1, min(cap, math.ceil((boundary - consumed) / b)))
        while n > 1 and self.batch_size(consumed + (n - 1) * b) != b:
            n -= 1
        while n < cap and self.batch_size(consumed + n * b) == b:
            n += 1
        return n
