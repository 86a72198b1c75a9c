"""`mwb pretrain gpt --nproc 2 --fsdp` through the launcher: the same losses as one process (dropout 0), a
checkpoint that one process resumes, and one line for a layout it refuses."""
import json
import os
import subprocess
import sys

from tests.helpers.interrupt import mwb_env, run_mwb

SMALL = ["--set", "model.num_layers=2", "--set", "model.hidden_size=32", "--set", "model.num_attention_heads=4",
         "--set", "model.dropout=0", "--seed", "1", "--data", "synthetic", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "4", "--eval-interval", "0",
         "--set", "logging.progress=false"]


def _losses(out: str) -> list:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "split" not in r]


def test_fsdp_two_ranks_equal_one_process_and_one_process_resumes_it(tmp_path):
    fsdp, one = str(tmp_path / "fsdp"), str(tmp_path / "one")
    run_mwb("pretrain", "gpt", *SMALL, "--steps", "2", "--nproc", "2", "--fsdp", "--out", fsdp)
    run_mwb("pretrain", "gpt", *SMALL, "--steps", "4", "--out", one)
    want = _losses(one)
    got = _losses(fsdp)
    assert len(got) == 2 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(got, want[:2])), (got, want)
    resumed = run_mwb("pretrain", "gpt", *SMALL, "--steps", "4", "--out", fsdp, "--resume")
    assert "(step 2)" in resumed.stderr
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(_losses(fsdp)[2:], want[2:])), (_losses(fsdp), want)


def test_fsdp_with_pipeline_parallelism_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mwb", "pretrain", "gpt", *SMALL, "--steps", "1", "--nproc", "2",
                           "--fsdp", "--pp", "2", "--out", str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=300, env=mwb_env())
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["mwb: error: --fsdp shards over the data-parallel group only; --pp 2 is not supported with "
                     "it (use --pp 1, or drop --fsdp)"]
