"""The order in which one pipeline rank runs forward and backward passes: pure functions, no processes.

A schedule is, per rank, a list of *slots*; a slot is one or two computations (``Action``: forward or
backward of micro-batch ``mb`` through model chunk ``chunk``). The executor (:mod:`.schedules`) receives
every input a slot needs before it starts and sends what it produced right after it, together with the next
slot's receives. Keeping the orders separate from the communication lets :func:`simulate` check any of them
for deadlock and count in-flight micro-batches and the bubble on paper, and lets tests do so for many
layouts in milliseconds.

* **1F1B** (PipeDream-Flush, Narayanan et al. 2021): rank r runs ``pp - r - 1`` warm-up forwards, then
  alternates one forward and one backward, then drains the remaining backwards. At most ``pp - r``
  micro-batches are alive on rank r, instead of all of them as with GPipe.
* **Interleaved 1F1B** (Megatron): each rank holds ``vpp`` chunks (chunk v of rank r is stage v·pp + r).
  Forwards go through chunks in groups of ``pp`` micro-batches, warm-up is ``2(pp - r - 1) + (vpp - 1)·pp``
  forwards, and each steady slot is one forward and one backward. The bubble shrinks by ``vpp``; it needs
  the number of micro-batches to be a multiple of ``pp``.
* **GPipe**: every forward, then every backward (kept for the memory comparison).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..parallel.dims import LayoutError


@dataclass(frozen=True)
class Action:
    kind: str  # "F" or "B"
    chunk: int  # virtual chunk index on this rank (0 … vpp-1)
    mb: int  # micro-batch index

    def stage(self, pp: int, pp_rank: int) -> int:
        return self.chunk * pp + pp_rank


Slot = tuple  # tuple[Action, ...]


def one_f_one_b(pp: int, pp_rank: int, m: int) -> list[Slot]:
    warmup = min(pp - pp_rank - 1, m)
    slots: list[Slot] = [(Action("F", 0, k),) for k in range(warmup)]
    for i in range(m - warmup):
        slots += [(Action("F", 0, warmup + i),), (Action("B", 0, i),)]
    slots += [(Action("B", 0, i),) for i in range(m - warmup, m)]
    return slots


def check_interleaved(pp: int, vpp: int, m: int, micro_batch_size: int = 0, dp: int = 0) -> None:
    """Megatron's interleaved schedule walks the micro-batches in groups of ``pp``."""
    if m % pp:
        how = ""
        if micro_batch_size and dp:
            how = (f" (global batch / (micro-batch size {micro_batch_size} × data-parallel size {dp})); choose "
                   f"a global batch size that is a multiple of {micro_batch_size * dp * pp}")
        raise LayoutError(f"the interleaved pipeline schedule (vpp {vpp}) needs the number of micro-batches "
                          f"per step to be a multiple of pp {pp}, got {m} micro-batches{how}, or use --vpp 1")


def _interleaved_action(kind: str, k: int, pp: int, vpp: int) -> Action:
    group = k % (pp * vpp)
    chunk = group // pp
    if kind == "B":
        chunk = vpp - 1 - chunk
    return Action(kind, chunk, (k // (pp * vpp)) * pp + k % pp)


def interleaved(pp: int, vpp: int, pp_rank: int, m: int) -> list[Slot]:
    check_interleaved(pp, vpp, m)
    total = m * vpp
    warmup = min(2 * (pp - pp_rank - 1) + (vpp - 1) * pp, total)
    slots: list[Slot] = [(_interleaved_action("F", k, pp, vpp),) for k in range(warmup)]
    for k in range(total - warmup):
        slots.append((_interleaved_action("F", k + warmup, pp, vpp), _interleaved_action("B", k, pp, vpp)))
    slots += [(_interleaved_action("B", k, pp, vpp),) for k in range(total - warmup, total)]
    return slots


def gpipe(pp: int, pp_rank: int, m: int, vpp: int = 1) -> list[Slot]:
    """All forwards, then all backwards (chunks in stage order forwards, reverse order backwards)."""
    fwd = [(Action("F", c, k),) for c in range(vpp) for k in range(m)]
    bwd = [(Action("B", c, k),) for c in reversed(range(vpp)) for k in range(m)]
    return fwd + bwd


def forward_only(pp: int, vpp: int, pp_rank: int, m: int) -> list[Slot]:
    """Evaluation: forwards only, in the order a training step would run them."""
    if vpp == 1:
        return [(Action("F", 0, k),) for k in range(m)]
    check_interleaved(pp, vpp, m)
    return [(_interleaved_action("F", k, pp, vpp),) for k in range(m * vpp)]


ORDERS: dict[str, Callable[..., list[Slot]]] = {
    "1f1b": lambda pp, vpp, r, m: one_f_one_b(pp, r, m) if vpp == 1 else interleaved(pp, vpp, r, m),
    "gpipe": lambda pp, vpp, r, m: gpipe(pp, r, m, vpp),
    "forward": forward_only,
}


# --------------------------------------------------------------------------------------------- simulation


@dataclass
class Simulation:
    makespan: float
    busy: list[float]  # per rank
    peak_in_flight: list[int]  # per rank: most (chunk, micro-batch) pairs forwarded but not yet backwarded

    def bubble(self, rank: int) -> float:
        """Idle time over busy time of ``rank`` (Narayanan et al.'s t_pb / t_id)."""
        return (self.makespan - self.busy[rank]) / self.busy[rank]


def simulate(kind: str, pp: int, vpp: int, m: int, t_f: float = 1.0, t_b: float = 2.0) -> Simulation:
    """Run the schedule of every rank on paper with zero-cost communication; raise on deadlock.

    ``t_f``/``t_b`` are the forward/backward time of one micro-batch through one *whole* stage (a chunk
    takes 1/vpp of it). Each slot starts once the previous slot on its rank is done and every message it
    receives has been sent (messages leave at the end of the slot that produced them, as in the executor).
    """
    stages = pp * vpp
    orders = [ORDERS[kind](pp, vpp, r, m) for r in range(pp)]
    sent: dict[tuple, float] = {}  # (kind, stage, mb) -> time the message left
    done = {}  # (rank, chunk, mb, kind) -> finished
    pos, clock = [0] * pp, [0.0] * pp
    busy, live, peak = [0.0] * pp, [0] * pp, [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            if pos[r] == len(orders[r]):
                continue
            slot = orders[r][pos[r]]
            ready = clock[r]
            for a in slot:
                s = a.stage(pp, r)
                need = ("act", s - 1, a.mb) if a.kind == "F" and s > 0 else \
                    ("grad", s + 1, a.mb) if a.kind == "B" and s < stages - 1 else None
                if need is not None and need not in sent:
                    break
                if need is not None:
                    ready = max(ready, sent[need])
            else:
                t = ready
                for a in slot:
                    s = a.stage(pp, r)
                    if a.kind == "B" and (r, a.chunk, a.mb, "F") not in done:
                        raise RuntimeError(f"{kind}: rank {r} runs backward of {a} before its forward")
                    t += (t_f if a.kind == "F" else t_b) / vpp
                    done[(r, a.chunk, a.mb, a.kind)] = True
                    live[r] += 1 if a.kind == "F" else -1
                    peak[r] = max(peak[r], live[r])
                for a in slot:
                    s = a.stage(pp, r)
                    if a.kind == "F" and s < stages - 1:
                        sent[("act", s, a.mb)] = t
                    if a.kind == "B" and s > 0:
                        sent[("grad", s, a.mb)] = t
                busy[r] += t - ready
                clock[r] = t
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{kind} schedule deadlocks for pp {pp}, vpp {vpp}, {m} micro-batches "
                               f"(stuck at slots {[o[p] if p < len(o) else None for o, p in zip(orders, pos)]})")
    return Simulation(max(clock), busy, peak)
