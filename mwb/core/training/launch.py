"""Starting ranks: ``--nproc N`` through torch's elastic launcher, or the environment set by ``torchrun``.

Under ``torchrun`` (or SLURM + torchrun) RANK/WORLD_SIZE/MASTER_ADDR/... are already set and the same entry
point just joins the group; ``--nproc N`` runs torch.distributed's own elastic launcher on this machine
(no home-made launcher). NCCL is used when CUDA is available, gloo otherwise. Each CPU rank gets
``cpu_threads // world`` intra-op threads so ranks do not oversubscribe the cores.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import sys
import tempfile
import time
import traceback
import uuid
from typing import Callable

import torch
import torch.distributed as dist
# Imported before init_process_group on purpose: importing these after init makes some gloo runs abort
# at exit (see shared/ENVIRONMENT.md).
import torch.distributed.nn.functional  # noqa: F401

from ..atomic import atomic_write_json
from ..errors import MwbError, RankError, debug_enabled, error_kind


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
        import torch.distributed.fsdp as _fsdp  # noqa: F401  (before init: importing it later can abort gloo at exit)
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, device


def launch(fn: Callable, nproc: int, *args) -> None:
    """Run ``fn(*args)`` on ``nproc`` local ranks with torch.distributed's elastic launcher.

    A rank that raises writes its error to a per-run directory and exits; the launcher then stops the
    other ranks and this function raises :class:`~mwb.core.errors.RankError` for the first error written
    (later ones are usually other ranks losing their peer), so the CLI can print one line. Without
    ``--debug``/``MWB_DEBUG=1`` the launcher's own log (tracebacks of its monitoring) is silenced.
    SIGTERM/SIGINT reach the ranks, which save and stop as one process does; when every rank's main
    function returned, that is a normal end (exit 0), as is a rank that finished and then died at exit.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex[:8],
                       rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                       monitor_interval=0.2, start_method="spawn")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    quiet = not debug_enabled()
    with tempfile.TemporaryDirectory(prefix="mwb-errors-") as errors:
        previous = logging.root.manager.disable
        if quiet:
            logging.disable(logging.CRITICAL)  # this process only: it just monitors; ranks log as usual
        try:
            elastic_launch(cfg, run_rank)(fn, errors, *args)
        except ChildFailedError as e:
            if not stopped_cleanly(errors, nproc):
                raise rank_failure(errors, e) from (e if not quiet else None)
        except SignalException as e:  # SIGTERM/SIGINT here: the launcher passed it on to the ranks
            if not stopped_cleanly(errors, nproc):
                if any(n.endswith(".json") for n in os.listdir(errors)):
                    raise rank_failure(errors, None) from None
                raise MwbError(f"stopped by signal {e.sigval.name} before every rank finished; continue from "
                               f"the last complete checkpoint with --resume") from None
        finally:
            logging.disable(previous)


_stop_signals: list = []  # signals this rank's trainer took as "save and stop" (see note_stop_signal)


def note_stop_signal(signum: int) -> None:
    """Record that this process took SIGTERM/SIGINT as "save and stop" (the trainer's handler calls this).

    Under :func:`launch` such a signal came from, or together with, the launcher shutting down; it no
    longer collects return values and would wait its shutdown timeout, then kill the rank, so
    :func:`run_rank` exits as soon as the rank's main function has returned instead.
    """
    _stop_signals.append(signum)


def run_rank(fn: Callable, errors: str, *args) -> None:
    """One rank's entry point under :func:`launch`: run ``fn``; on an exception, record it and exit non-zero.

    The record is written before exiting, so the first file by time is the failure that started it.
    ``os._exit`` after flushing, instead of unwinding through interpreter teardown, avoids exit-time aborts
    of gloo processes (see shared/ENVIRONMENT.md) and the launcher's extra tracebacks.
    """
    rank = int(os.environ.get("RANK", 0))
    try:
        fn(*args)
        with open(os.path.join(errors, f"rank_{rank}.done"), "w"):
            pass
        if _stop_signals:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + _stop_signals[0])  # the launcher sees "done" files: a clean stop, not a failure
    except Exception as e:  # noqa: BLE001 - every failure is reported to the launching process
        record = {"rank": rank, "kind": error_kind(e), "time": time.time(),
                  "message": str(e) if error_kind(e) != "internal" else f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
        path = os.path.join(errors, f"rank_{rank}.json")
        atomic_write_json(path, record, indent=None)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2 if record["kind"] == "usage" else 1)


def stopped_cleanly(errors: str, nproc: int) -> bool:
    """Every rank's main function returned (ranks stopped by a signal exit early, after saving)."""
    names = os.listdir(errors)
    return all(f"rank_{r}.done" in names for r in range(nproc))


def rank_failure(errors: str, failed) -> RankError:
    """The error of the rank that failed first (by the time it was recorded), or, when no rank recorded one
    (killed by a signal, out of memory), a :class:`RankError` naming the rank and its exit status."""
    records = []
    for name in os.listdir(errors):
        if name.endswith(".json"):
            with open(os.path.join(errors, name)) as f:
                records.append(json.load(f))
    if records:
        r = min(records, key=lambda r: (r["time"], r["rank"]))
        return RankError(r["rank"], r["kind"], r["message"], r["traceback"])
    rank, failure = failed.get_first_failure()
    how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
    return RankError(rank, "runtime", f"the process ended with {how} without reporting an error "
                                      f"(killed, or out of memory?); run with --debug for the launcher's log")
