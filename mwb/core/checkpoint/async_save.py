"""Asynchronous checkpoints (``--async-save``): the step goes on while the shards are written.

What blocks the step is only what must see the live model: the staging directory (one barrier), a CPU copy
of this rank's tensors, and gathering the (small) metadata entries to rank 0. A background thread per rank
then writes its copy as ``shard_XXXXX.safetensors`` (fsynced, atomic) and leaves a ``.done_XXXXX`` marker;
rank 0's thread waits for every rank's marker, removes them, and commits as a synchronous save does
(metadata.json → one rename to ``step_N`` → ``latest`` → prune). Until then the checkpoint is only
``.step_N.incomplete/``, which nothing reads, so a kill at any moment leaves ``latest`` on the previous
complete checkpoint. The background threads use no collective (no second communicator beside training's).

At most one save is in flight: the next save, and the end of :meth:`Trainer.run`, wait for it
(:func:`wait_for_save`), which is where a background error surfaces, on every rank, as one
:class:`CheckpointError` line. A rank whose writer fails leaves ``.failed_XXXXX`` with the reason, so rank 0
stops waiting and names it. The threads are not daemons: a save started after the run (``mwb finetune``'s
last one) still finishes before the interpreter exits.

Test hook: with ``MWB_ASYNC_SAVE_GATE=DIR`` each writer thread touches ``DIR/step_N.started`` and holds until
``DIR/step_N.go`` exists, which makes a save slow deterministically (the kill -9 test).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from ..atomic import atomic_write_text
from ..errors import CheckpointError
from .format import shard_name, write_safetensors
from .writer import ExtraFiles, _gather, commit, metadata, snapshot, stage
from .writer import save as save_now

GATE_ENV = "MWB_ASYNC_SAVE_GATE"
POLL_S = 0.01


def _done(rank: int) -> str:
    return f".done_{rank:05d}"


def _failed(rank: int) -> str:
    return f".failed_{rank:05d}"


@dataclass
class PendingSave:
    """One save in flight: its directory, its thread and what the thread reports (``error``: one line)."""
    final: str
    thread: threading.Thread
    report: dict = field(default_factory=dict)


def _hold_at_gate(step: int) -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate:
        return
    os.makedirs(gate, exist_ok=True)
    atomic_write_text(os.path.join(gate, f"step_{step}.started"), "")
    while not os.path.exists(os.path.join(gate, f"step_{step}.go")):
        time.sleep(POLL_S)


def _await_ranks(tmp: str, world: int, timeout_s: float) -> None:
    """Rank 0's writer: return once every rank's shard is on disk; raise if one failed or never came."""
    deadline = time.monotonic() + timeout_s
    waiting = set(range(world))
    while waiting:
        for r in sorted(waiting):
            failed = os.path.join(tmp, _failed(r))
            if os.path.exists(failed):
                with open(failed) as f:
                    raise CheckpointError(f"rank {r} could not write its shard: {f.read().strip()}")
            if os.path.exists(os.path.join(tmp, _done(r))):
                waiting.discard(r)
        if waiting and time.monotonic() > deadline:
            raise CheckpointError(f"ranks {sorted(waiting)} wrote no shard within {timeout_s:g} s")
        if waiting:
            time.sleep(POLL_S)


def _write(trainer, root: str, tmp: str, final: str, tensors: dict, meta: Optional[dict], keep_last: int,
           extra_files: ExtraFiles, report: dict) -> None:
    rank, world = trainer.state.rank, trainer.dims.world_size
    try:
        _hold_at_gate(int(os.path.basename(final).split("_")[1]))
        file = shard_name(rank)
        size = write_safetensors(tensors, os.path.join(tmp, file))
        tensors.clear()  # the CPU copy is on disk: free it now, not when the next save replaces the record
        atomic_write_text(os.path.join(tmp, _done(rank)), str(size))
        if rank != 0:
            return
        _await_ranks(tmp, world, trainer.cfg.parallel.timeout_s)
        for info in meta["files"].values():
            with open(os.path.join(tmp, _done(info["rank"]))) as f:
                info["bytes"] = int(f.read())
        for r in range(world):
            os.remove(os.path.join(tmp, _done(r)))
        commit(trainer, root, tmp, final, meta, keep_last, extra_files)
    except Exception as e:  # reported by wait_for_save on the training thread
        report["error"] = f"{type(e).__name__}: {e}" if not isinstance(e, CheckpointError) else str(e)
        try:
            atomic_write_text(os.path.join(tmp, _failed(rank)), report["error"])
        except OSError:
            pass


def save(trainer, root: str, keep_last: int = 0, extra_files: ExtraFiles = None) -> str:
    """``checkpoint.save``: in the background with ``train.async_save``, else :func:`.writer.save`. Either
    way a save in flight is finished first, so checkpoints commit in step order."""
    if getattr(trainer.cfg.train, "async_save", False):
        return save_async(trainer, root, keep_last, extra_files)
    wait_for_save(trainer)
    return save_now(trainer, root, keep_last, extra_files)


def save_async(trainer, root: str, keep_last: int = 0, extra_files: ExtraFiles = None) -> str:
    """Start writing ``root/step_N`` for the trainer's current step (call on every rank) and return its path
    at once; it is a complete checkpoint only after :func:`wait_for_save` (or once ``latest`` names it)."""
    wait_for_save(trainer)  # one save in flight at a time; prune and ``latest`` see them in order
    tmp, final = stage(trainer, root)
    tensors, entry = snapshot(trainer, shard_name(trainer.state.rank), copy=True)
    entries = _gather(entry, trainer.dims.world_size)
    meta = metadata(trainer, entries) if trainer.state.rank == 0 else None
    report: dict = {}
    thread = threading.Thread(target=_write, name=f"mwb-async-save-{trainer.step}",
                              args=(trainer, root, tmp, final, tensors, meta, keep_last, extra_files, report))
    thread.start()
    trainer.pending_save = PendingSave(final, thread, report)
    return final


def wait_for_save(trainer) -> Optional[str]:
    """Block until the save in flight (if any) is committed; returns its directory. A failure on any rank
    raises one :class:`CheckpointError` on every rank (the ranks agree through one all-reduce)."""
    pending: Optional[PendingSave] = getattr(trainer, "pending_save", None)
    if pending is None:
        return None
    pending.thread.join()
    trainer.pending_save = None
    error = pending.report.get("error")
    failed = error is not None
    if trainer.dims.world_size > 1:  # also orders rank 0's commit before any rank goes on
        flag = torch.tensor([1.0 if failed else 0.0], device=trainer.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        failed = bool(flag.item())
    if error:
        raise CheckpointError(f"asynchronous checkpoint {pending.final} failed: {error}")
    if failed:
        raise CheckpointError(f"asynchronous checkpoint {pending.final} failed on another rank (rank 0 names it)")
    return pending.final
