"""Learning-rate schedules: warm-up then cosine / linear / constant / warmup-stable-decay."""
import math

import pytest

from mwb.core.config import OptimConfig
from mwb.core.optim.schedules import lr_at


def test_warmup_then_cosine():
    c = OptimConfig(lr=1.0, min_lr=0.1, warmup_steps=4, lr_schedule="cosine")
    assert [lr_at(s, c, 14) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(4, c, 14) == pytest.approx(1.0)
    assert lr_at(9, c, 14) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(14, c, 14) == pytest.approx(0.1)
    assert lr_at(100, c, 14) == pytest.approx(0.1)


def test_linear_constant_wsd():
    lin = OptimConfig(lr=1.0, min_lr=0.0, lr_schedule="linear")
    assert lr_at(5, lin, 10) == pytest.approx(0.5)
    const = OptimConfig(lr=0.3, lr_schedule="constant", warmup_steps=2)
    assert lr_at(0, const, 10) == pytest.approx(0.15) and lr_at(7, const, 10) == 0.3
    wsd = OptimConfig(lr=1.0, min_lr=0.0, lr_schedule="wsd", wsd_decay_fraction=0.2)
    assert lr_at(7, wsd, 10) == 1.0  # stable phase
    assert lr_at(8, wsd, 10) == pytest.approx(1.0) and lr_at(9, wsd, 10) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        lr_at(0, OptimConfig(lr_schedule="bogus"), 10)
