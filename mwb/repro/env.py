"""``env.json``: what a reproduction ran on — the mwb commit, torch, the device, threads, the machine's load
at the start and the end, the wall time and the energy — so a number can be traced and a slow or noisy run
explained (other processes on a shared machine show up in the load average).
"""
from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Optional

import torch

from mwb.core.config import EnergyConfig
from mwb.core.training.energy import EnergyMeter

SOURCE = Path(__file__).resolve().parents[2]  # the checkout mwb runs from (editable installs)


def git_commit(root: Path = SOURCE) -> dict:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout holding this mwb."""
    def git(*args) -> Optional[str]:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"commit": sha, "dirty": bool(status) if status is not None else None}


def _load() -> Optional[list]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def device_name() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs"


class EnvRecorder:
    """Started before the first cell, finished after the last: the record for ``env.json``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.load_start = _load()
        self.meter = EnergyMeter(EnergyConfig(), cuda_index=0 if torch.cuda.is_available() else None)

    def finish(self) -> dict:
        reading = self.meter.read()
        cfg = EnergyConfig()
        return {"mwb": git_commit(), "torch": torch.__version__, "python": platform.python_version(),
                "device": device_name(), "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                "started": self.started, "wall_s": time.perf_counter() - self.t0,
                "load_average_start": self.load_start, "load_average_end": _load(),
                "energy": {**reading.record(cfg.grid_gco2_per_kwh), "source": reading.source}}
