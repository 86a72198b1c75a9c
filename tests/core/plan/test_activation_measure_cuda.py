"""Activation bytes of one real mwb layer on a CUDA device against the planner (skipped without CUDA).

The CPU test (``test_activation_measure.py``) accounts for every byte on CPU; this one checks the CUDA
branches of ``known_differences``: fused attention also with attention dropout, 1-byte dropout masks,
16-bit RMSNorm. One rank (TP1), bf16, every recompute mode; the measured bytes are within 10% of the planner
plus the named differences, and full recompute keeps exactly the layer input.
"""
import pytest
import torch

from mwb.core.plan.measure import compare, format_table, measure_layer
from tests.core.plan.test_activation_measure import CONFIGS, MODES, TOLERANCE

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def cuda_rows() -> list[dict]:
    cases = [c.with_(recompute=m, device="cuda") for c in CONFIGS for m in MODES]
    return [compare(c, measure_layer(c).bytes) for c in cases]


def test_activation_bytes_match_planner_on_cuda():
    rows = cuda_rows()
    print("\n" + format_table(rows))
    for r in rows:
        assert abs(r["ratio"] - 1) <= TOLERANCE, \
            f"{r['case']}: measured {r['measured']} B, predicted {r['explained']:.0f} B ({r['differences']})"
        if "full" in r["case"]:
            assert r["measured"] == r["planner"], r
