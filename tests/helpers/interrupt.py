"""kill -9 in the middle of a run: start ``mwb`` in its own process group, wait for a checkpoint, SIGKILL it all.

SIGTERM lets a run save and stop (``tests/cli/test_pretrain_cli.py``); SIGKILL gives it no say, as an out-of-
memory kill or a lost node does, and kills the launcher and every rank at once (the whole process group), so
what is on disk is whatever the run had finished writing. The resumed run must then continue from the last
complete checkpoint exactly as the uninterrupted run went on.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def mwb_env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")


def run_mwb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m mwb ARGS`` to completion; asserts exit 0."""
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=timeout,
                          env=mwb_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def latest_step(ckpt_root: str) -> int:
    """The step ``ckpt_root/latest`` names (0 when there is none yet)."""
    try:
        with open(os.path.join(ckpt_root, "latest")) as f:
            return int(f.read().strip().split("_")[1])
    except (OSError, ValueError, IndexError):
        return 0


def kill_after_checkpoint(args: list[str], ckpt_root: str, before: int, timeout: float = 180) -> int:
    """Start ``mwb ARGS``; once ``ckpt_root/latest`` names a step in ``[1, before)``, SIGKILL its process group.
    Returns that step. Fails if the run ends (or passes ``before``) first, which would test nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "mwb", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=mwb_env(), start_new_session=True)
    deadline = time.time() + timeout
    step = 0
    try:
        while time.time() < deadline and proc.poll() is None:
            step = latest_step(ckpt_root)
            if step:
                break
            time.sleep(0.01)
        alive = proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    assert alive and 0 < step < before, f"not killed mid-run (step {step}, alive {alive}): {err[-2000:]}"
    return latest_step(ckpt_root)


def train_losses(out: str) -> dict[int, float]:
    """``{step: loss}`` of the training records in ``OUT/metrics.jsonl``."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "split" not in r}
