"""``mwb repro megatron-scaling --scale smoke``: the files are written, the parameter counts equal the papers'
printed values, the measured activation bytes sit where Korthikanti et al.'s formulas put them, and the
commands in commands.sh print the same counts."""
from __future__ import annotations

import json
import shlex

import pytest

from mwb.core.plan import korthikanti_bytes_per_layer
from mwb.core.plan.paper import TABLE1
from mwb.repro.experiments.megatron_scaling import SHOEYBI_TABLE1
from tests.helpers.cli import run_cli
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron-scaling") / "smoke"
    _, cpu = run_smoke("megatron-scaling", out)
    return out, cpu


def test_smoke_writes_every_file_within_a_minute_of_two_cores(smoke):
    out, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS / 2, cpu  # CPU seconds (tests/helpers/repro_smoke.py)
    for name in ("report.md", "results.json", "commands.sh", "env.json", "megatron-scaling.png"):
        assert (out / name).stat().st_size > 100, name
    res = json.loads((out / "results.json").read_text())
    assert res["deterministic"] is True and res["seeds"] == [0] and res["scale"] == "smoke"
    assert [p["arxiv"] for p in res["paper"]] == ["1909.08053", "2104.04473", "2205.05198"]
    # the verdict is the headline rows' agreement, recomputed here from the stored comparisons
    head = [r for r in res["comparisons"] if r["headline"]]
    assert len(head) == 2 * (len(TABLE1) + len(SHOEYBI_TABLE1)) + 2  # params ×2 per row; selective + full
    assert res["verdict"] == ("shown" if all(abs(r["ours"] - r["paper"]) <= r["allowed"] for r in head)
                              else "not shown")
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "What this scale can and cannot show" in md


def test_table1_counts_equal_the_printed_values(smoke):
    res = json.loads((smoke[0] / "results.json").read_text())
    conds = res["conditions"]
    for row in TABLE1:
        name = f"table1-{row.preset.removeprefix('gpt-')}"
        for metric in ("params_b", "params_b_formula"):
            (ours,) = conds[name][metric]
            assert abs(ours - row.params_b) <= 0.05, (name, metric, ours, row.params_b)  # printed to one decimal
    for printed, layers, hidden, _ in SHOEYBI_TABLE1:
        (ours,) = conds[f"shoeybi-{printed:g}b"]["params_b"]
        assert round(ours, 1) == printed, (layers, hidden, ours)
    rows = {(r["b"], r["metric"]): r for r in res["comparisons"]}
    assert rows[("table1-1t", "params_b")]["paper"] == 1008.0 and rows[("table1-1t", "params_b")]["within"]


def test_activation_bytes_against_korthikanti(smoke):
    res = json.loads((smoke[0] / "results.json").read_text())
    s, b, h, a = 32, 2, 64, 4
    by_mode = {m: res["conditions"][f"act-s{s}-b{b}-h{h}-a{a}-tp1-{m}"] for m in ("none", "selective", "full")}
    assert by_mode["full"]["activation_bytes"] == [2 * s * b * h]  # only the layer input is kept: exact
    sel = by_mode["selective"]["activation_bytes"][0]
    assert abs(sel / korthikanti_bytes_per_layer(s, b, h, a, recompute="selective") - 1) <= 0.10
    # every byte is accounted for by the planner plus the named CPU differences
    for m, vals in by_mode.items():
        assert vals["activation_bytes"] == vals["explained_bytes"], m
    none_row = next(r for r in res["comparisons"] if r["b"].endswith("tp1-none"))
    assert none_row["headline"] is False and none_row["paper"] == korthikanti_bytes_per_layer(s, b, h, a)


def test_commands_print_the_same_counts(smoke, capsys):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(TABLE1) + len(SHOEYBI_TABLE1) and all(a[1] == "plan" for a in lines)
    for argv in (lines[0], lines[-1]):  # a Shoeybi row and the 1T row of Narayanan's Table 1
        code, stdout, err = run_cli(argv[1:], capsys)
        assert code == 0, err
        params = json.loads(stdout)["parameters"]
        cond = "shoeybi-1.2b" if argv is lines[0] else "table1-1t"
        assert params["total"] / 1e9 == pytest.approx(res["conditions"][cond]["params_b"][0])
        assert params["paper_formula"] / 1e9 == pytest.approx(res["conditions"][cond]["params_b_formula"][0])


@pytest.mark.parametrize("name", ["cpu", "gpu", "paper"])
def test_every_scale_has_every_recompute_and_sp_row(name, monkeypatch, tmp_path):
    """Issue 48: a scale that measured TP 1 only would drop the SP rows and read "shown" by omission. Every
    shape of every scale has all three recompute modes on one rank and under TP 2 + SP, and on a CUDA scale the
    TP 2 rows go to gloo ranks on the CPU (one device cannot hold two ranks)."""
    from mwb.repro.experiments import megatron_measure
    from mwb.repro.experiments.megatron_scaling import MODES, MegatronScaling, parse_act
    exp = MegatronScaling()
    scale = exp.scales[name]
    acts = [parse_act(c) for c in exp.conditions_for(scale) if c.startswith("act-")]
    for shape in scale.params["shapes"]:
        got = {(t, sp, m) for sh, t, sp, m in acts if sh == tuple(shape)}
        assert got == {(1, False, m) for m in MODES} | {(2, True, m) for m in MODES}
    seen = []
    monkeypatch.setattr(megatron_measure, "activation_cell",
                        lambda shape, t, sp, mode, device, workdir: seen.append((t, device)))
    for c in exp.conditions_for(scale):
        if c.startswith("act-"):
            exp.compute_cell(c, 0, scale, str(tmp_path), {})
    want_one = scale.params.get("device", "cpu")
    assert {d for t, d in seen if t == 1} == {want_one} and {d for t, d in seen if t == 2} == {"cpu"}
    assert "TP 2 + SP" in exp.scope(scale)
