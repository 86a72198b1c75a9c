"""`mwb pretrain gpt` as a user runs it: run directory, layouts via --nproc, errors, SIGTERM + --resume;
`mwb pretrain t5` under PP2 and TP2+SP, `mwb pretrain bert` under TP2, on the bundled corpus."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

SMALL = ["--set", "model.num_layers=2", "--set", "model.hidden_size=64", "--set", "model.num_attention_heads=4",
         "--set", "model.dropout=0", "--seed", "1", "--data", "synthetic", "--seq-length", "32",
         "--eval-interval", "0", "--eval-steps", "1"]


def mwb(*args, check=True, **kw):
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=300, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"mwb {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "split" not in r}


def test_run_directory_and_determinism(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    proc = mwb("pretrain", "gpt", "--steps", "4", "--out", a, *SMALL)
    for name in ("metrics.jsonl", "config.yaml", "loss.png", "tensorboard", "checkpoints/latest",
                 "checkpoints/step_4/metadata.json"):
        assert os.path.exists(os.path.join(a, name)), name
    assert a in proc.stdout and "loss.png" in proc.stdout
    rec = json.loads(open(os.path.join(a, "metrics.jsonl")).readline())
    assert {"step", "loss", "lr", "grad_norm", "tokens_per_s"} <= set(rec)
    mwb("pretrain", "gpt", "--steps", "4", "--out", b, *SMALL)
    assert losses(a) == losses(b)  # bit-identical on CPU


@pytest.mark.multiprocess
def test_nproc_tp_sp_matches_single_process(tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    mwb("pretrain", "gpt", "--steps", "3", "--out", one, *SMALL)
    mwb("pretrain", "gpt", "--steps", "3", "--out", two, "--nproc", "2", "--tp", "2", "--sp", *SMALL)
    l1, l2 = losses(one), losses(two)
    assert l1.keys() == l2.keys()
    for k in l1:
        assert abs(l1[k] - l2[k]) / l1[k] < 1e-5


T5 = ["--steps", "2", "--seq-length", "64", "--global-batch-size", "4", "--micro-batch-size", "2",
      "--set", "model.hidden_size=64", "--set", "model.dropout=0", "--eval-interval", "0", "--eval-steps", "1"]


@pytest.fixture(scope="module")
def t5_one_process(tmp_path_factory):
    """The one-process T5 run both layouts below are compared against (the same arguments): launched once."""
    one = str(tmp_path_factory.mktemp("t5") / "one")
    mwb("pretrain", "t5", "--out", one, *T5)
    return one


@pytest.mark.multiprocess
@pytest.mark.parametrize("layout", [["--pp", "2"], ["--tp", "2", "--sp"]], ids=["pp2", "tp2_sp"])
def test_t5_parallel_on_bundled_data_matches_single_process(tmp_path, layout, t5_one_process):
    """`mwb pretrain t5 --nproc 2 --pp 2` / `--tp 2 --sp` on the real span-corruption data (decoder length
    set by the dataset, padded to a multiple of 8 so SP can split it), against one process."""
    two = str(tmp_path / "two")
    mwb("pretrain", "t5", "--out", two, "--nproc", "2", *layout, *T5)
    l1, l2 = losses(t5_one_process), losses(two)
    assert sorted(l1) == sorted(l2) == [1, 2]
    for k in l1:
        assert abs(l1[k] - l2[k]) / l1[k] < 1e-5
    assert os.path.exists(os.path.join(two, "checkpoints", "step_2", "metadata.json"))


@pytest.mark.multiprocess
def test_bert_default_layout_reports_lm_and_sop_losses_and_matches_tp2(tmp_path):
    """The bert-tiny preset (post-norm, rotary) on the bundled corpus, in one process and at --nproc 2 --tp 2:
    the log carries lm_loss / sop_loss (train and valid) and valid lm_ppl, and the layouts agree."""
    runs = {}
    for name, layout in (("one", []), ("tp2", ["--nproc", "2", "--tp", "2"])):
        out = str(tmp_path / name)
        mwb("pretrain", "bert", "--out", out, "--steps", "2", "--global-batch-size", "4",
            "--micro-batch-size", "4", "--eval-interval", "2", "--eval-steps", "1", *layout)
        runs[name] = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    for recs in runs.values():
        train = [r for r in recs if "split" not in r]
        valid = [r for r in recs if r.get("split") == "valid"]
        assert len(train) == 2 and len(valid) == 1
        for r in train:  # one micro-batch per step: the loss is exactly mean LM + mean SOP
            assert abs(r["loss"] - r["lm_loss"] - r["sop_loss"]) < 1e-5 * r["loss"]
        assert {"lm_loss", "sop_loss", "lm_ppl"} <= set(valid[0])
    for a, b in zip(runs["one"], runs["tp2"]):
        for k in ("loss", "lm_loss", "sop_loss"):
            assert abs(a[k] - b[k]) < 1e-5 * a[k], f"step {a['step']} {k}: {a[k]} vs tp2 {b[k]}"


@pytest.mark.parametrize("args,needle", [
    (["--set", "model.num_attention_heads=3", "--nproc", "2", "--tp", "2"], "attention heads 3 is not divisible"),
    (["--set", "model.bogus=1"], "unknown config key 'model.bogus'"),
    (["--sp"], "sequence parallelism"),
])
def test_bad_layout_or_key_is_one_line_exit_2(tmp_path, args, needle):
    proc = mwb("pretrain", "gpt", "--data", "synthetic", "--out", str(tmp_path / "x"), *args, check=False)
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_sigterm_then_resume_reproduces_uninterrupted_losses(tmp_path):
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    common = ["--steps", "30", "--save-interval", "100", *SMALL]
    mwb("pretrain", "gpt", "--out", ref, *common)
    proc = subprocess.Popen([sys.executable, "-m", "mwb", "pretrain", "gpt", "--out", run, *common],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(run, "metrics.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(metrics) and len(open(metrics).readlines()) >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    stopped = max(losses(run))
    assert stopped < 30 and "stopped by signal" in err
    assert open(os.path.join(run, "checkpoints", "latest")).read().strip() == f"step_{stopped}"
    mwb("pretrain", "gpt", "--out", run, "--resume", *common)
    got, want = losses(run), losses(ref)
    assert sorted(got) == list(range(1, 31))
    assert got == want  # same layout: bit-identical
