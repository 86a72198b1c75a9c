"""Run a pipeline schedule: forward and backward passes of this rank's chunks, with the exchange between.

``get_pipeline_schedule(state)`` returns a callable with the no-pipeline schedule's signature
(:func:`mwb.core.training.schedules.forward_backward_no_pipelining`): 1F1B when vpp == 1, interleaved 1F1B
when vpp > 1, forwards only when ``forward_only`` (evaluation). It returns ``(Σ loss_sum, Σ count)`` as
float64 scalars, zeros on every stage but the last; the trainer all-reduces them.

Per slot of the order (:mod:`.orders`): receive what the slot needs (activations from the previous stage,
gradients from the next), run its computations, and queue what they produced to be sent with the next
slot's receives. A received activation becomes a leaf that requires grad, so after the chunk's backward its
``.grad`` is the gradient to send upstream. The last stage's backward starts from ``loss_sum ·
loss_factor`` (loss scale / nominal token count), exactly as without a pipeline, so every layout
accumulates the same gradients into the fp32 ``main_grad`` buffers. Tensor/sequence/data parallelism and
the distributed optimizer need nothing from here: each TP rank exchanges with the same TP rank of the
neighbouring stage (``state.pp_peer``), and with SP the exchanged tensor is the local sequence slice.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch

from .orders import ORDERS, check_interleaved
from .p2p import P2P, Recv, Send, message_tag


class _NoObserver:
    """Hook points for :mod:`.measure` (timing each computation, tagging saved tensors)."""

    def compute(self, kind: str, chunk: int, mb: int):
        return contextlib.nullcontext()


def _model_dtype_device(chunk: torch.nn.Module) -> tuple[torch.dtype, torch.device]:
    p = next(chunk.parameters())
    return p.dtype, p.device


def _hidden_shape(spec, state, batch, seq_length, micro_batch_size) -> tuple[int, ...]:
    """The message shape for one micro-batch (the spec may read the batch: T5's decoder length is the
    dataset's, not ``seq_length``)."""
    if (seq_length is None or micro_batch_size is None) and "tokens" in batch:  # GPT-style: seq + 1 tokens
        tokens = batch["tokens"]
        micro_batch_size = micro_batch_size or tokens.size(0)
        seq_length = seq_length or tokens.size(1) - 1
    return tuple(spec.hidden_shape(micro_batch_size, seq_length, state, batch=batch))


def run_pipeline(order: str, chunks, microbatches, spec, state, loss_factor: float, forward_only: bool = False,
                 seq_length: Optional[int] = None, micro_batch_size: Optional[int] = None,
                 observer=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Execute the ``order`` ('1f1b' — interleaved when several chunks — or 'gpipe') on this rank."""
    pp, vpp, r, m = state.pp_size, len(chunks), state.pp_rank, len(microbatches)
    if vpp > 1 and order != "gpipe":
        check_interleaved(pp, vpp, m, micro_batch_size or 0, state.dp_size)
    slots = ORDERS["forward" if forward_only else order](pp, vpp, r, m)
    observer = observer or _NoObserver()
    stages = pp * vpp
    shapes = [_hidden_shape(spec, state, mb, seq_length, micro_batch_size) for mb in microbatches]
    dtype, device = _model_dtype_device(chunks[0])
    comm = P2P(state)
    prev_rank, next_rank = state.pp_peer(-1), state.pp_peer(1)
    inputs: dict = {}  # (chunk, mb) -> received activation (leaf) or None on the first stage
    outputs: dict = {}  # (chunk, mb) -> output hidden, or the scaled loss on the last stage
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.float64, device=device)
    to_send: list[Send] = []

    def receives(slot) -> list[Recv]:
        out = []
        for a in slot:
            s = a.stage(pp, r)
            shape = shapes[a.mb]
            if a.kind == "F" and s > 0:
                out.append(Recv(("F", a.chunk, a.mb), torch.empty(shape, dtype=dtype, device=device), prev_rank,
                                message_tag("act", s - 1, a.mb, stages),
                                f"activation of micro-batch {a.mb} for stage {s}"))
            elif a.kind == "B" and s < stages - 1:
                out.append(Recv(("B", a.chunk, a.mb), torch.empty(shape, dtype=dtype, device=device), next_rank,
                                message_tag("grad", s + 1, a.mb, stages),
                                f"gradient of micro-batch {a.mb} for stage {s}"))
        return out

    for slot in slots:
        got = comm.exchange(to_send, receives(slot))
        to_send = []
        for a in slot:
            s, key = a.stage(pp, r), (a.chunk, a.mb)
            if a.kind == "F":
                inp = got.get(("F", a.chunk, a.mb))
                if inp is not None and not forward_only:
                    inp.requires_grad_(True)
                chunk = chunks[a.chunk]
                with torch.set_grad_enabled(not forward_only), observer.compute("F", a.chunk, a.mb):
                    out = spec.forward(chunk, microbatches[a.mb], hidden=inp)
                if s == stages - 1:
                    loss_sum, n = out
                    total += loss_sum.detach().double()
                    count += n.detach().double()
                    out = None if forward_only else loss_sum * loss_factor
                else:
                    to_send.append(Send(out.detach().to(dtype).contiguous(), next_rank,
                                        message_tag("act", s, a.mb, stages),
                                        f"activation of micro-batch {a.mb} from stage {s}"))
                if not forward_only:
                    inputs[key], outputs[key] = inp, out
            else:
                inp, out = inputs.pop(key), outputs.pop(key)
                with observer.compute("B", a.chunk, a.mb):
                    if s == stages - 1:
                        torch.autograd.backward(out)
                    else:
                        g = got[("B", a.chunk, a.mb)]
                        torch.autograd.backward(out, grad_tensors=g.to(out.dtype))
                if s > 0:
                    to_send.append(Send(inp.grad.to(dtype).contiguous(), prev_rank,
                                        message_tag("grad", s, a.mb, stages),
                                        f"gradient of micro-batch {a.mb} from stage {s}"))
                del inp, out
    comm.exchange(to_send, [])
    comm.finish()
    return total, count


def make_schedule(order: str = "1f1b") -> Callable:
    """A trainer-compatible schedule function running ``order``."""
    def schedule(chunks, microbatches, spec, state, loss_factor: float, forward_only: bool = False,
                 seq_length: Optional[int] = None, micro_batch_size: Optional[int] = None, observer=None, **_):
        return run_pipeline(order, chunks, microbatches, spec, state, loss_factor, forward_only,
                            seq_length, micro_batch_size, observer)
    schedule.__name__ = f"forward_backward_pipelining_{order}"
    return schedule


def get_pipeline_schedule(state) -> Callable:
    """1F1B for vpp == 1, interleaved 1F1B for vpp > 1 (the order picks itself from the chunk count)."""
    return make_schedule("1f1b")
