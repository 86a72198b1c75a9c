"""Blending: Megatron's largest-deficit rule, proportions, and blends through build_datasets."""
from __future__ import annotations

import numpy as np
import pytest

from mwb.core.data import build_datasets
from mwb.core.data.blend import BlendedDataset, blending_indices
from mwb.core.errors import DataError


def test_rule_and_proportions():
    which, within = blending_indices([1, 1, 2], 8)
    assert which.tolist() == [2, 0, 1, 2, 0, 2, 1, 2]  # largest deficit w*max(i,1) - drawn, first of ties
    assert within.tolist() == [0, 0, 0, 1, 1, 2, 1, 3]
    w = np.array([0.2, 0.5, 0.3])
    which, within = blending_indices(w, 10_000)
    for d in range(3):
        assert abs((which == d).mean() - w[d]) < 0.01
        assert within[which == d].tolist() == list(range(int((which == d).sum())))  # each dataset in order
    # every prefix of the blend is on target to within a couple of samples
    counts = np.stack([np.cumsum(which == d) for d in range(3)], 1)
    target = np.arange(1, 10_001)[:, None] * w
    assert np.abs(counts - target).max() <= 2
    with pytest.raises(DataError):
        blending_indices([0, 0], 4)


def test_blended_dataset_and_build(doc_prefix, sent_prefix, tok):
    a = [{"src": np.array(0), "i": np.array(i)} for i in range(100)]
    b = [{"src": np.array(1), "i": np.array(i)} for i in range(100)]
    ds = BlendedDataset([a, b], ["3", "1"], 40)
    srcs = [int(ds[i]["src"]) for i in range(40)]
    assert srcs.count(0) == 30 and len(ds) == 40
    train, valid, _ = build_datasets("gpt", ["0.7", doc_prefix, "0.3", sent_prefix], tok, 32, 5, "949,50,1",
                                     (200, 20, 0))
    assert isinstance(train, BlendedDataset) and len(train) == 200 and len(valid) == 20
    assert abs((train.which == 0).mean() - 0.7) < 0.01
    assert all(train[i]["tokens"].shape == (33,) for i in range(0, 200, 7))
