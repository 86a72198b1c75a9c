"""Cross-entropy over large vocabularies, a block of tokens at a time.

``F.cross_entropy`` on ``logits[..., :vocab].float()`` materialises a full fp32 copy of the logits (the
slice and cast), keeps a full fp32 log-softmax for backward and makes a third full tensor for the
gradient of the slice. Here the logits themselves are saved (they exist anyway), each block of rows is
cast to fp32 only while it is processed, and backward writes the gradient once, straight in the logits'
dtype and padded shape. Peak extra memory is one block (``BLOCK_ELEMENTS`` fp32 values) plus O(tokens).

fp32 logits without padded columns need no slice or cast: they take one ``log_softmax`` (what
``F.cross_entropy`` keeps too), and backward turns that saved log-softmax into the gradient in place
(exp, scale, subtract at the targets). ``F.cross_entropy``'s backward instead allocates and zero-fills a
one-hot gradient and a second full tensor for the log-softmax gradient; on a CPU, the page faults of
those fresh allocations cost more than the arithmetic. Measured fwd+bwd, 2 cores: [2048, 8192] 33 ms
against 71 ms, [1024, 49152] 94 ms against 202 ms. The price: the graph cannot be backpropagated twice
(``retain_graph``), which mwb never does; a second backward raises instead of returning a wrong gradient.

When the model's output layer is a plain ``nn.Linear``, :func:`linear_cross_entropy` takes the hidden
states instead: the logits are made inside it, from a workspace kept between steps, and become their own
gradient (no log-softmax, no gradient tensor; the head's weight gradient can go straight to ``main_grad``).

The same function serves logits split over the vocabulary (tensor parallelism): every rank computes the
log-sum-exp of its own columns; ``reduce_max`` and ``reduce_sum`` (all-reduces over the TP group, or
nothing) combine them: lse = m + log Σ_r exp(lse_r − m) with m = max_r lse_r, and the target logit comes
from the rank that holds it. Two all-reduces of per-token vectors, whatever the vocabulary.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .main_grad import weight_grad

BLOCK_ELEMENTS = 1 << 23  # fp32 values of one block: 32 MiB
# fp32 temporaries of the fused output layer's log-sum-exp: 16 MiB, under glibc's largest mmap threshold
# (32 MiB), so that after the first step they come from the heap instead of fresh zeroed pages
LSE_BLOCK_ELEMENTS = 1 << 22
# fp32 values of one block of the fused output layer's in-place exp: 4 MiB, so that the max, exp and sum
# passes over a block find it in cache (measured at [1024, 49152]: 37 ms against 72 ms for logsumexp blocks)
EXP_BLOCK_ELEMENTS = 1 << 20
# On a GPU, each block is a handful of kernel launches and the caching allocator reuses memory anyway: few
# large blocks (256 MiB of fp32). With the CPU's 4 MiB blocks, SmolLM2-135M at 64 × 2,048 tokens took 1,542
# blocks per pass and ran 10% slower on an H200.
GPU_BLOCK_ELEMENTS = 1 << 26


def _noop(t: torch.Tensor) -> None:
    return None


def _spend(ctx, what: str) -> None:
    """A backward that consumes what its forward saved runs once; a second one raises, never misleads."""
    if ctx.spent:
        raise RuntimeError(f"mwb's {what}: the graph cannot be backpropagated twice (retain_graph)")
    ctx.spent = True


class _BlockedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, start, vocab_size, reduce_max, reduce_sum):
        n, local_v = logits.shape
        real = min(max(vocab_size - start, 0), local_v)  # this shard's columns of the real vocabulary
        block = max(1, BLOCK_ELEMENTS // max(local_v, 1))
        lse = torch.full((n,), float("-inf"), dtype=torch.float32, device=logits.device)
        if real:
            for a in range(0, n, block):
                lse[a:a + block] = torch.logsumexp(logits[a:a + block, :real].float(), dim=-1)
        local = labels - start
        mine = (local >= 0) & (local < real)
        idx = local.clamp(0, max(real - 1, 0))
        target = logits.gather(1, idx[:, None]).squeeze(1).float().masked_fill(~mine, 0.0)
        if reduce_max is not _noop:  # combine the shards' log-sum-exps
            top = lse.clone()
            reduce_max(top)
            parts = torch.stack([(lse - top).exp(), target])
            reduce_sum(parts)
            lse, target = top + parts[0].log(), parts[1]
        ctx.save_for_backward(logits, lse, idx, mine)
        ctx.real, ctx.block = real, block
        return lse - target

    @staticmethod
    def backward(ctx, g):
        logits, lse, idx, mine = ctx.saved_tensors
        real, block = ctx.real, ctx.block
        grad = torch.empty_like(logits)
        grad[:, real:] = 0  # padded vocabulary columns
        if not real:
            return grad, None, None, None, None, None
        in_place = logits.dtype == torch.float32  # fp32: softmax written straight into the gradient
        for a in range(0, logits.size(0), block):
            x, out = logits[a:a + block, :real], grad[a:a + block, :real]
            p = torch.sub(x, lse[a:a + block, None], out=out) if in_place else x.float() - lse[a:a + block, None]
            p.exp_()
            rows = torch.arange(p.size(0), device=p.device)
            p[rows, idx[a:a + block]] -= mine[a:a + block].to(p.dtype)
            p.mul_(g[a:a + block, None])
            if not in_place:
                out.copy_(p)
        return grad, None, None, None, None, None


class _InPlaceCrossEntropy(torch.autograd.Function):
    """fp32, unpadded, one rank: log-softmax forward; its saved output becomes the gradient in backward."""

    @staticmethod
    def forward(ctx, logits, labels):
        logsm = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(logsm, labels)
        ctx.spent = False
        return logsm.gather(1, labels[:, None]).squeeze(1).neg()

    @staticmethod
    def backward(ctx, g):
        _spend(ctx, "cross-entropy reuses its saved log-softmax as the gradient")
        logsm, labels = ctx.saved_tensors
        grad = logsm.exp_()  # softmax
        grad.mul_(g[:, None])
        rows = torch.arange(grad.size(0), device=grad.device)
        grad[rows, labels] -= g
        return grad, None


class _LinearCrossEntropy(torch.autograd.Function):
    """The output layer and the cross-entropy in one function, so that the logits never leave it: backward
    turns them into their own gradient in place. No log-softmax, no gradient tensor, no copy.

    fp32 logits are exponentiated in place in forward, a block of rows at a time while the block is in
    cache: e = exp(x − max), s = Σe, lse = max + log s. Backward is then one multiply, softmax · g = e · g/s,
    and a subtraction at the targets. 16-bit logits are kept as they are; backward recomputes each block's
    softmax in fp32 from them and the saved log-sum-exp, and writes the gradient back in their dtype."""

    @staticmethod
    def forward(ctx, x, weight, labels, vocab_size, workspace):
        shape = (x.size(0), weight.size(0))
        spare = workspace.take(shape, x.dtype, x.device)
        logits = torch.mm(x, weight.t(), out=spare) if spare is not None else torch.mm(x, weight.t())
        n, v = logits.shape
        real = min(vocab_size, v)
        target = logits.gather(1, labels[:, None]).squeeze(1).float()
        fp32 = logits.dtype == torch.float32
        per_block = (EXP_BLOCK_ELEMENTS if fp32 else LSE_BLOCK_ELEMENTS) if logits.device.type == "cpu" \
            else GPU_BLOCK_ELEMENTS
        block = max(1, per_block // max(real, 1))
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        norm = torch.empty(n, dtype=torch.float32, device=logits.device) if fp32 else lse
        for a in range(0, n, block):
            rows = logits[a:a + block, :real]
            if fp32:  # rows become e = exp(x - max); norm = Σe
                top = rows.amax(dim=1, keepdim=True)
                rows.sub_(top).exp_()
                torch.sum(rows, dim=1, out=norm[a:a + block])
                lse[a:a + block] = top.squeeze(1) + norm[a:a + block].log()
            else:
                lse[a:a + block] = torch.logsumexp(rows.float(), dim=-1)
        ctx.save_for_backward(x, weight, logits, norm, labels)
        ctx.real, ctx.block, ctx.spent, ctx.workspace = real, block, False, workspace
        return lse - target

    @staticmethod
    def backward(ctx, g):
        _spend(ctx, "fused output-layer cross-entropy turns its logits into their gradient")
        x, weight, logits, norm, labels = ctx.saved_tensors
        real, block = ctx.real, ctx.block
        grad = logits  # becomes d loss / d logits, block by block
        grad[:, real:] = 0  # padded vocabulary columns
        fp32 = grad.dtype == torch.float32
        for a in range(0, grad.size(0), block):
            out, ga = grad[a:a + block, :real], g[a:a + block]
            if fp32:  # e · g/s
                p = out.mul_((ga / norm[a:a + block])[:, None])
            else:  # exp(x - lse) · g, in fp32
                p = out.float().sub_(norm[a:a + block, None]).exp_().mul_(ga[:, None])
            p[torch.arange(p.size(0), device=p.device), labels[a:a + block]] -= ga.to(p.dtype)
            if not fp32:
                out.copy_(p)
        gx = torch.mm(grad, weight) if ctx.needs_input_grad[0] else None
        # straight into the optimizer's main_grad when it can (see .main_grad)
        gw = weight_grad(weight, grad.t(), x) if ctx.needs_input_grad[1] else None
        ctx.workspace.give(grad)  # spent: the next forward may write its logits here
        return gx, gw, None, None, None


class LogitsWorkspace:
    """One spare logits tensor, handed from a backward pass to the next forward. On a CPU, a tensor this
    large is a fresh ``mmap`` every step, and touching its zeroed pages costs more than the loss itself
    (16k page faults, 5% of a step, at 2,048 tokens × 8,192 words); a GPU's caching allocator does this
    reuse by itself. A forward *takes* the spare (so two forwards in flight never share it) and its backward
    *gives* it back; a forward whose backward never runs simply leaves the next one to allocate afresh. The
    price is that one logits tensor stays allocated between steps; :meth:`clear` lets it go."""

    def __init__(self) -> None:
        self.spare: Optional[torch.Tensor] = None

    def take(self, shape, dtype, device) -> Optional[torch.Tensor]:
        t, self.spare = self.spare, None
        if t is not None and tuple(t.shape) == tuple(shape) and t.dtype == dtype and t.device == device:
            return t
        return None

    def give(self, t: torch.Tensor) -> None:
        self.spare = t

    def clear(self) -> None:
        self.spare = None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                         workspace: Optional[LogitsWorkspace] = None) -> torch.Tensor:
    """Per-token losses (fp32, shaped like ``labels``) of the output layer ``hidden @ weight.T`` (``weight``
    [padded_vocab, h], no bias) followed by the cross-entropy over the first ``vocab_size`` columns. Same
    values as ``blocked_cross_entropy(F.linear(hidden, weight), labels, vocab_size)``; the logits stay inside
    and become their own gradient (see :class:`_LinearCrossEntropy`). ``labels`` must be valid ids."""
    flat = hidden.reshape(-1, hidden.size(-1))
    return _LinearCrossEntropy.apply(flat, weight, labels.reshape(-1), vocab_size,
                                     workspace or LogitsWorkspace()).view_as(labels)


def blocked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int, start: int = 0,
                          reduce_max: Optional[Callable[[torch.Tensor], None]] = None,
                          reduce_sum: Optional[Callable[[torch.Tensor], None]] = None) -> torch.Tensor:
    """Per-token losses (fp32, shaped like ``labels``) of ``logits [..., local_vocab]`` whose columns are the
    vocabulary ids ``start, start+1, …``; columns at or beyond ``vocab_size`` (padding) never count.
    ``labels`` must be valid ids (callers clamp ignored positions to 0 and mask their losses)."""
    flat = logits.reshape(-1, logits.size(-1))
    if reduce_max is None and flat.dtype == torch.float32 and start + flat.size(1) <= vocab_size:
        # fp32 and no padded columns: nothing to slice or cast; one log-softmax (the size of the logits),
        # turned into the gradient in place (module docstring)
        return _InPlaceCrossEntropy.apply(flat, labels.reshape(-1)).view_as(labels)
    losses = _BlockedCrossEntropy.apply(flat, labels.reshape(-1), start, vocab_size,
                                        reduce_max or _noop, reduce_sum or _noop)
    return losses.view_as(labels)
