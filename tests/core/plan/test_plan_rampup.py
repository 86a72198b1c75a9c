"""``mwb plan --rampup-batch-size``: the run's time and energy summed over the ramp-up's phases, each at the
cost model's time per iteration for its batch on the best layout; layouts the ramp cannot use are refused."""
from __future__ import annotations

import json

import pytest

from mwb.cli.main import main
from mwb.core.config import RunConfig
from mwb.core.plan import HARDWARE, Constraints, CostModel, MemoryModel, Workload, plan
from mwb.core.plan.report import energy_estimate
from mwb.core.plan.search import structural_problem
from mwb.core.plan.layout import Layout
from mwb.core.presets import apply_preset

SEQ = 2048


def _plan(rampup, gbs=1920, gpus=2240):
    m = apply_preset(RunConfig(), "gpt-530b").model
    return plan(m, Workload(gpus, gbs, "bf16", rampup), HARDWARE["a100-80gb"], Constraints(), SEQ)


def test_energy_sums_the_phases_at_their_own_iteration_times():
    ramp = (32, 32, 6_000_000)  # MT-NLG: 32 → 1,920 over ~12 B tokens
    result = _plan(ramp)
    tokens = 270e9
    e = energy_estimate(result, tokens, 475.0)
    r = e["rampup"]
    best = result.best
    # an independent sum: every step of Megatron's schedule at the cost model's time for its batch
    per_increment = ramp[2] / ((1920 - ramp[0]) // ramp[1])
    consumed, seconds, steps, times = 0, 0.0, 0, {}
    while consumed < tokens / SEQ:
        b = 1920 if consumed > ramp[2] else ramp[0] + int(consumed / per_increment) * ramp[1]
        if b not in times:
            times[b] = CostModel(MemoryModel(result.shape, b, "bf16"), result.hardware).estimate(best.layout).time_s
        seconds += times[b]
        consumed += b
        steps += 1
    assert r["iterations"] == steps and r["seconds"] == pytest.approx(seconds, rel=1e-9)
    assert e["seconds"] == pytest.approx(seconds, rel=1e-9)
    assert times[32] / 32 > times[1920] / 1920  # a small batch costs more per sample (bubble, DP reduction)
    assert r["seconds"] > r["constant_batch_seconds"]
    plain = energy_estimate(_plan(None), tokens, 475.0)
    assert e["train_flops"] == plain["train_flops"] and e["energy_j"] > plain["energy_j"]
    assert e["mfu"] < plain["mfu"]


def test_layouts_must_split_every_ramp_batch():
    result = _plan((32, 32, 6_000_000))
    for est in result.fits:
        lay = est.layout
        assert 32 % (lay.dp * lay.micro_batch_size) == 0
    shape = result.shape
    wl = Workload(8, 64, "bf16", (8, 8, 1000))
    assert structural_problem(shape, Layout(tp=1, pp=1, dp=8, micro_batch_size=2), wl) == \
        "a ramp-up batch size is not divisible by dp·micro-batch"
    assert structural_problem(shape, Layout(tp=1, pp=1, dp=8, micro_batch_size=1), wl) is None


def test_cli_flag_and_json(capsys):
    args = ["plan", "--preset", "gpt-530b", "--gpus", "2240", "--global-batch-size", "1920", "--train-tokens",
            "270e9", "--top", "1"]
    main([*args, "--rampup-batch-size", "32", "32", "6000000", "--json"])
    e = json.loads(capsys.readouterr().out)["energy"]
    assert e["rampup"]["start"] == 32 and e["rampup"]["ramp_iterations"] > 0
    main([*args, "--rampup-batch-size", "32", "32", "6000000"])
    out = capsys.readouterr().out
    assert "batch ramp-up" in out and "against a constant batch" in out
    with pytest.raises(SystemExit) as exc:
        main([*args, "--rampup-batch-size", "32", "33", "6000000"])
    assert exc.value.code == 2
