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
