"""The issue-36 flags as a user types them: `--lora` on pretraining (TP2 equals one process, trainable
parameters and checkpoint size in the log) and on `mwb finetune` (the runner unchanged; the best checkpoint
evaluated, generated from and exported through the merge), `--rampup-batch-size` (metrics.jsonl logs each
step's global batch) and `--precision fp8` (the CPU run says it emulates)."""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.checkpoints import tiny_checkpoint

SMALL = ["--set", "model.num_layers=2", "--set", "model.hidden_size=64", "--set", "model.num_attention_heads=4",
         "--set", "model.dropout=0", "--seed", "1", "--data", "synthetic", "--seq-length", "32",
         "--eval-interval", "0", "--eval-steps", "1", "--set", "logging.progress=false"]


def mwb(*args):
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert proc.returncode == 0, f"mwb {' '.join(args)}:\n{proc.stderr[-3000:]}"
    return proc


def records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if "split" not in r]


@pytest.mark.multiprocess
def test_pretrain_lora_tp2_matches_one_process_and_logs_sizes(tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    common = ["--steps", "3", "--lora", "8", "--lora-alpha", "16", "--lr", "1e-2", *SMALL]
    p1 = mwb("pretrain", "gpt", "--out", one, *common)
    mwb("pretrain", "gpt", "--out", two, "--nproc", "2", "--tp", "2", "--sp", *common)
    a, b = [r["loss"] for r in records(one)], [r["loss"] for r in records(two)]
    assert len(a) == len(b) == 3 and max(abs(x - y) / x for x, y in zip(a, b)) < 1e-5
    # 2 layers × (q, k, v, o: 8·128 each; up, down: 8·320 each)
    assert "mwb: LoRA rank 8 (alpha 16, dropout 0) on qkv,proj,fc1,fc2: 18,432 trainable parameters" in p1.stderr
    assert "mwb: LoRA checkpoint" in p1.stderr and "MiB" in p1.stderr and "is not copied" in p1.stderr
    meta = json.load(open(os.path.join(one, "checkpoints", "step_3", "metadata.json")))
    assert meta["lora"]["trainable"] == 18432 and meta["lora"]["base"] is None
    assert all(".lora_" in name for name in meta["tensors"])


def test_finetune_lora_runs_unchanged_and_its_run_loads_everywhere(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=2, hidden_size=64)
    rows = [{"prompt": f"Say {w}. Reply:", "target": f" {w}"} for w in ("yes", "no", "maybe", "never")]
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "ft")
    proc = mwb("finetune", "prompt-target", "--checkpoint", ckpt, "--data", str(data), "--lora", "8",
               "--epochs", "6", "--lr", "1e-2", "--global-batch-size", "4", "--micro-batch-size", "2", "--out", out,
               "--set", "logging.progress=false")
    assert "trainable parameters" in proc.stderr and os.path.abspath(ckpt) in proc.stderr
    losses = [r["loss"] for r in records(out)]
    assert losses[-1] < losses[0]  # only the adapters train, and the target loss falls
    res = json.load(open(os.path.join(out, "results.json")))
    best = res["best_checkpoint"]
    meta = json.load(open(os.path.join(best, "metadata.json")))
    assert meta["lora"]["base"] == os.path.abspath(ckpt) and all(".lora_" in n for n in meta["tensors"])
    # the best checkpoint was evaluated (merged on load): `mwb eval` of it gives the recorded value
    again = str(tmp_path / "eval")
    mwb("eval", "prompt-target", "--checkpoint", best, "--data", str(data), "--out", again)
    assert json.load(open(os.path.join(again, "results.json")))["metrics"]["exact_match"] == \
        res["metrics"]["exact_match"]
    prompt = ("--prompt", "Say yes. Reply:", "--max-tokens", "3", "--temperature", "0", "--json")
    gen = json.loads(mwb("generate", "--checkpoint", out, *prompt).stdout)
    mwb("convert", out, str(tmp_path / "hf"), "--merge")
    assert os.path.isfile(tmp_path / "hf" / "model.safetensors")
    merged = json.loads(mwb("generate", "--checkpoint", str(tmp_path / "hf"), *prompt).stdout)
    assert gen["tokens"] and merged["tokens"] == gen["tokens"]  # adapters merged at load = the merged export
    assert merged["logprobs"] == pytest.approx(gen["logprobs"], abs=1e-4)


def test_rampup_logs_the_global_batch_of_every_step(tmp_path):
    out = str(tmp_path / "r")
    mwb("pretrain", "gpt", "--out", out, "--steps", "6", "--global-batch-size", "8", "--micro-batch-size", "2",
        "--rampup-batch-size", "2", "2", "12", *SMALL)
    recs = records(out)
    # Megatron: 12 samples over 3 increments = one increment per 4 samples; consumed 0,2,4,8,14,22
    assert [r["global_batch_size"] for r in recs] == [2, 2, 4, 6, 8, 8]


def test_fp8_on_cpu_says_it_emulates(tmp_path):
    proc = mwb("pretrain", "gpt", "--out", str(tmp_path / "f"), "--steps", "2", "--precision", "fp8",
               *SMALL, "--set", "model.num_layers=3")  # after SMALL's 2 layers: the later --set wins
    assert proc.stderr.count("fp8 is emulated on CPU") == 1
    assert "fp8 on 1 of 3 layers" in proc.stderr
    assert len(records(str(tmp_path / "f"))) == 2
