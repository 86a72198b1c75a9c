"""``mwb plan`` through the real entry point (``mwb.cli.main.main``), exit codes included."""
from __future__ import annotations

import json

import pytest

from mwb.cli.main import main


def _run(capsys, *args):
    try:
        main(["plan", *args])
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_1t_on_3072_gpus(capsys):
    code, out, err = _run(capsys, "--preset", "gpt-1t", "--gpus", "3072", "--gpu-memory", "80", "--peak-tflops",
                          "312", "--global-batch-size", "3072", "--seq-length", "2048")
    assert code == 0, err
    assert "1,008.04 B" in out  # exact count and the paper's formula
    assert "best layout: tp 8" in out and "layouts that fit" in out
    assert "bubble" in out and "TP " in out and "DP " in out and "activations" in out


def test_plan_defaults_and_json(capsys):
    code, out, _ = _run(capsys)
    assert code == 0 and "gpt-1.3b" in out and "1.32 B" in out
    code, out, _ = _run(capsys, "--preset", "gpt-145b", "--gpus", "1536", "--global-batch-size", "2304",
                        "--tp", "8", "--pp", "8", "--recompute", "full", "--no-sp", "--top", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert round(d["parameters"]["total"] / 1e9, 1) == 145.6
    assert len(d["layouts"]) == 3
    assert all((x["layout"]["tp"], x["layout"]["pp"], x["layout"]["recompute"], x["layout"]["sp"])
               == (8, 8, "full", False) for x in d["layouts"])
    assert d["best"]["memory"]["total"] <= 78 * 2**30


@pytest.mark.parametrize("args, code, text", [
    (("--preset", "gpt-1t", "--gpus", "8", "--global-batch-size", "8"), 1, "nothing fits"),
    (("--preset", "gpt-1t", "--gpus", "64", "--tp", "3"), 2, "tp=3"),
    (("--set", "model.nope=1"), 2, "model.nope"),
    (("--preset", "gpt-1t", "--seq-length", "4096"), 2, "max_position_embeddings"),
])
def test_plan_errors_are_one_line(capsys, args, code, text):
    got, out, err = _run(capsys, *args)
    assert got == code and text in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_plan_moe_reports_active_parameters(capsys):
    code, out, err = _run(capsys, "--preset", "llama-tiny", "--set", "model.num_experts=4", "--set",
                          "model.vocab_size=1000", "--ep", "2", "--gpus", "4", "--top", "2")
    assert code == 0, err
    assert "active per token" in out and "EP " in out


def test_hardware_choices_match_the_table():
    from mwb.cli.plan import HARDWARE_NAMES
    from mwb.core.plan import HARDWARE
    assert sorted(HARDWARE_NAMES) == sorted(HARDWARE)


def test_plan_prints_the_energy_of_the_planned_run(capsys):
    """MT-NLG 530B's setting: 2,240 A100s, batch 1,920 × 2,048, 270 B tokens. The printed energy is the
    model FLOPs over (GPUs · peak · MFU) seconds at 400 W per GPU; the JSON carries the same numbers."""
    args = ("--preset", "gpt-530b", "--gpus", "2240", "--global-batch-size", "1920", "--train-tokens", "270e9")
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    assert "energy of the planned run" in out and "MWh" in out and "CO2e" in out and "475 gCO2e/kWh" in out
    code, out, _ = _run(capsys, *args, "--json", "--grid-gco2", "100", "--device-power", "500")
    e = json.loads(out)["energy"]
    per_token = json.loads(out)["flops_per_iteration"]["per_token"]["none"]
    assert e["train_flops"] == pytest.approx(per_token * 270e9)
    seconds = e["train_flops"] / (2240 * 312e12 * e["mfu"])
    assert e["energy_j"] == pytest.approx(seconds * 2240 * 500.0)
    assert e["co2e_t"] == pytest.approx(e["energy_j"] / 3.6e6 * 100 / 1e6) and 0 < e["mfu"] < 1


def test_set_wins_over_flags_as_in_every_other_command(capsys):
    """One precedence rule (options.build_config): preset → --config → flags → --set, --set last."""
    from mwb.cli.options import build_config

    cfg = build_config("gpt-tiny", {"seq_length": 64, "sets": ("train.seq_length=128",)})
    assert cfg.train.seq_length == 128
    args = ("--preset", "gpt-1.3b", "--gpus", "64", "--top", "2", "--json")
    _, want, _ = _run(capsys, *args, "--seq-length", "1024", "--global-batch-size", "256", "--precision", "fp16",
                      "--grid-gco2", "100")
    code, got, err = _run(capsys, *args, "--seq-length", "2048", "--set", "train.seq_length=1024",
                          "--global-batch-size", "1024", "--set", "train.global_batch_size=256",
                          "--precision", "fp32", "--set", "train.precision=fp16",
                          "--grid-gco2", "500", "--set", "energy.grid_gco2_per_kwh=100")
    assert code == 0, err
    w, g = json.loads(want), json.loads(got)
    assert g == w
    _, other, _ = _run(capsys, *args, "--seq-length", "2048", "--global-batch-size", "256", "--precision", "fp16",
                       "--grid-gco2", "100")
    assert json.loads(other) != w  # the sequence length does change the plan: the comparison above can fail
