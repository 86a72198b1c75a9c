"""Activation bytes one real mwb layer saves for backward (saved-tensor hooks) against the planner.

Every config × {none, selective, full} × {TP1, TP2+SP}, bf16: the measurement is within 10% of
``activation_bytes_per_layer`` (given the layer's shape keywords) plus the named differences of
``known_differences``; for the paper's GPT shape on one rank the planner alone is within 10%, and under
full recompute (only the layer input is kept) it is exact. One spawn of two ranks measures everything:
the TP2+SP layer on both ranks (each its own shard), the single-rank cases shared out between them.
"""
from __future__ import annotations

import pytest

from mwb.core.plan.measure import LayerCase, compare, format_table, measure_on_rank
from tests.helpers.distributed import run_ranks

CONFIGS = [
    LayerCase(64, 2, 64, 4),  # the paper's GPT layer (GeLU, LayerNorm, MHA, ffn 4h), no dropout: fused attention
    LayerCase(128, 1, 128, 8, groups=2),  # grouped-query attention
    LayerCase(64, 2, 64, 2, dropout=0.1),  # hidden dropout masks, fused attention
    LayerCase(32, 4, 96, 4, ffn=256, activation="swiglu", normalization="rmsnorm"),  # Llama-style
    LayerCase(64, 2, 64, 4, dropout=0.1, attn_dropout=0.1),  # attention dropout: math kernel, s×s tensors
]
MODES = ("none", "selective", "full")
LAYOUTS = ((1, False), (2, True))
TOLERANCE = 0.10


@pytest.mark.multiprocess
def test_activation_bytes_match_planner():
    cases = [c.with_(t=t, sp=sp, recompute=m) for t, sp in LAYOUTS for c in CONFIGS for m in MODES]
    ranks = run_ranks(measure_on_rank, 2, cases, timeout_s=150)
    measured = []
    for i, case in enumerate(cases):
        if case.t == 1:
            measured.append(ranks[i % 2][i])
        else:  # the layer is split evenly: both shards keep the same bytes
            assert ranks[0][i] == ranks[1][i], (case.label, ranks[0][i], ranks[1][i])
            measured.append(ranks[0][i])
    rows = [compare(c, m) for c, m in zip(cases, measured)]
    print("\n" + format_table(rows))
    for case, r in zip(cases, rows):
        assert abs(r["ratio"] - 1) <= TOLERANCE, \
            f"{r['case']}: measured {r['measured']} B, predicted {r['explained']:.0f} B ({r['differences']})"
        if case.recompute == "full":
            assert r["measured"] == r["planner"], r
        if case.t == 1 and case.with_(recompute="none") == CONFIGS[0]:
            assert abs(r["ratio_planner"] - 1) <= TOLERANCE, r


PAPER = LayerCase(64, 2, 64, 4, dropout=0.1, attn_dropout=0.1)  # the megatron-scaling experiment's layer


@pytest.mark.multiprocess
def test_recompute_rows_within_two_percent_of_korthikanti():
    """Selective and full recompute at TP1 and TP2+SP: within 2% of Korthikanti et al.'s closed form (the
    SP linears keep the local shard, dropout masks take 1 byte). Without recompute the rows are the formula
    plus the named CPU differences (float32 math attention, LayerNorm statistics), to 0.1%."""
    from mwb.core.plan.formulas import korthikanti_bytes_per_layer
    cases = [PAPER.with_(t=t, sp=sp, recompute=m) for t, sp in LAYOUTS for m in MODES]
    ranks = run_ranks(measure_on_rank, 2, cases, timeout_s=150)
    print("\n| layer (per rank) | measured B | Korthikanti B | measured/Korthikanti | named differences B |")
    print("| --- | ---: | ---: | ---: | --- |")
    for i, case in enumerate(cases):
        measured = ranks[0][i] if ranks[0][i] is not None else ranks[1][i]
        paper = korthikanti_bytes_per_layer(case.s, case.b, case.h, case.a, case.t, case.sp, case.recompute)
        row = compare(case, measured)
        diff = ", ".join(f"{k} {v:,.0f}" for k, v in row["differences"].items()) or "–"
        print(f"| {case.label} | {measured:,} | {paper:,.0f} | {measured / paper:.3f} | {diff} |")
        if case.recompute == "none":
            assert abs(row["ratio"] - 1) <= 1e-3, row
            assert set(row["differences"]) == {"norm_stats", "math_attention"}, row
        else:
            assert abs(measured / paper - 1) <= 0.02, (case.label, measured, paper)
