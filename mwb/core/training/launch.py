"""Starting ranks: ``--nproc N`` through torch's elastic launcher, or the environment set by ``torchrun``.

Under ``torchrun`` (or SLURM + torchrun) RANK/WORLD_SIZE/MASTER_ADDR/... are already set and the same entry
point just joins the group; ``--nproc N`` runs torch.distributed's own elastic launcher on this machine
(no home-made launcher). NCCL is used when CUDA is available, gloo otherwise. Each CPU rank gets
``cpu_threads // world`` intra-op threads so ranks do not oversubscribe the cores.
"""
from __future__ import annotations

import datetime
import os
import socket
import uuid
from typing import Callable

import torch
import torch.distributed as dist
# Imported before init_process_group on purpose: importing these after init makes some gloo runs abort
# at exit (see shared/ENVIRONMENT.md).
import torch.distributed.nn.functional  # noqa: F401


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_launcher() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def device_for_rank() -> torch.device:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def init_distributed(timeout_s: float = 600.0) -> tuple[int, int, torch.device]:
    """Join the process group described by the environment; (rank, world, device)."""
    if not under_launcher() or int(os.environ["WORLD_SIZE"]) == 1:
        return 0, 1, device_for_rank()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = device_for_rank()
    if device.type == "cpu":
        cores = os.cpu_count() or 1
        torch.set_num_threads(max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, device


def launch(fn: Callable, nproc: int, *args) -> None:
    """Run ``fn(*args)`` on ``nproc`` local ranks with torch.distributed's elastic launcher."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex[:8],
                       rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                       monitor_interval=0.2, start_method="spawn")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    elastic_launch(cfg, fn)(*args)
