"""Point-to-point exchange of activations and gradients between neighbouring pipeline stages.

Why it looks like this:

* **Shapes are known ahead** (``spec.hidden_shape`` of each micro-batch, which every stage holds; with
  sequence parallelism it is already the local sequence slice), so a receiver allocates its buffer without
  a shape handshake, in the model's dtype.
* **One batch per gap between computations.** The sends produced by the previous computation and the
  receives needed by the next one are posted together with ``batch_isend_irecv``. For 1F1B this is exactly
  Megatron's pairing (``send_forward_recv_backward`` / ``send_backward_recv_forward``), which is what keeps
  NCCL, whose sends block the stream until matched, free of deadlock; gloo is simply asynchronous.
* **Receives are waited at once, sends are not.** A send completes when the peer gets to its receive; the
  sender keeps the work (and so the tensor) and waits for all of them at the end of the step. With the
  receive order fixed by the schedule, nothing can block while a peer is still computing.
* **Every message has its own tag** (direction, stage boundary, micro-batch), so on gloo a receive can only
  ever match the send meant for it, whatever the interleaving order. NCCL ignores tags; there the schedule's
  FIFO order between two ranks (the same on both sides by construction) is what matches them.
* **A dead or hung peer names itself.** gloo raises at once when a peer's socket closes and after the
  process-group timeout (``parallel.timeout_s``) when a peer hangs; :func:`wait_recv` turns either into a
  :class:`PipelineCommError` naming the peer rank. The first rank to notice records the culprit in the
  rendezvous store, so ranks further away, which only see their own neighbour give up, name the rank that
  actually failed rather than the messenger.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from ..errors import MwbError

_STORE_KEY = "mwb/pipeline/failed_rank"


class PipelineCommError(MwbError):
    """A pipeline peer died or stopped responding."""


def message_tag(kind: str, stage: int, microbatch: int, num_stages: int) -> int:
    """Unique tag for the activation (``kind='act'``) leaving ``stage`` forwards or the gradient
    (``kind='grad'``) leaving ``stage`` backwards, for one micro-batch of a step."""
    return 2 * (microbatch * num_stages + stage) + (0 if kind == "act" else 1)


@dataclass
class Recv:
    """A buffer to be filled from global rank ``peer``."""
    key: tuple
    buffer: torch.Tensor
    peer: int
    tag: int
    what: str  # for error messages, e.g. "activation of micro-batch 3 for stage 2"


@dataclass
class Send:
    tensor: torch.Tensor
    peer: int
    tag: int
    what: str


class P2P:
    """Posts batches of sends and receives over the pipeline group and waits for them with clear errors."""

    def __init__(self, state) -> None:
        self.state = state
        self.group = state.pp_group
        self.pending: list[tuple[object, Send]] = []  # posted sends not yet known to be complete

    def exchange(self, sends: list[Send], recvs: list[Recv]) -> dict:
        """Post ``sends`` and ``recvs`` as one batch; return ``{recv.key: filled buffer}``."""
        if not sends and not recvs:
            return {}
        ops = [dist.P2POp(dist.isend, s.tensor, s.peer, self.group, s.tag) for s in sends]
        ops += [dist.P2POp(dist.irecv, r.buffer, r.peer, self.group, r.tag) for r in recvs]
        try:
            works = dist.batch_isend_irecv(ops)
        except RuntimeError as e:  # a peer that is already gone can fail the post itself
            peer = (recvs[0].peer if recvs else sends[0].peer)
            raise self._failure(peer, f"posting point-to-point operations with rank {peer}", 0.0, e) from e
        self.pending.extend(zip(works[:len(sends)], sends))
        for work, r in zip(works[len(sends):], recvs):
            self.wait(work, r.peer, f"receiving the {r.what} from rank {r.peer}")
        self.pending = [(w, s) for w, s in self.pending if not w.is_completed()]
        return {r.key: r.buffer for r in recvs}

    def finish(self) -> None:
        """Wait for every send still in flight (end of the step)."""
        pending, self.pending = self.pending, []
        for work, s in pending:
            self.wait(work, s.peer, f"sending the {s.what} to rank {s.peer}")

    def wait(self, work, peer: int, doing: str) -> None:
        t0 = time.monotonic()
        try:
            work.wait()
        except RuntimeError as e:
            raise self._failure(peer, doing, time.monotonic() - t0, e) from e

    # ----------------------------------------------------------------------------------------- errors
    def _failure(self, peer: int, doing: str, waited: float, cause: Exception) -> PipelineCommError:
        culprit = _record_culprit(peer)
        st = self.state
        me = f"rank {st.rank} (pipeline stage {st.pp_rank})"
        if culprit is not None and culprit != peer:
            who = f"rank {culprit} died or stopped responding (rank {peer}, the neighbour {me} waited on, " \
                  f"gave up after it)"
        else:
            who = f"rank {peer} died or stopped responding"
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return PipelineCommError(
            f"{who}: {me} failed {doing} after {waited:.1f} s (a hung peer is given up on after "
            f"parallel.timeout_s). Check rank {peer if culprit is None else culprit}'s log for the first error. "
            f"[{first[:300]}]")


def _record_culprit(peer: int) -> Optional[int]:
    """Record ``peer`` as the failed rank unless another rank already recorded one; return the recorded
    rank (``None`` if the store itself is unreachable, e.g. because the rank hosting it died)."""
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(datetime.timedelta(seconds=5))  # a hung store host must not delay the error
        value = store.compare_set(_STORE_KEY, "", str(peer))
        return int(value.decode() if isinstance(value, bytes) else value)
    except Exception:  # noqa: BLE001 - the store is best effort; the local error is still raised
        return None

