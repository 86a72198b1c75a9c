"""A versioned evidence index that follows the context encoder while it trains, refreshed every N steps.

Joint training moves the context encoder, so the passage embeddings in the index go stale. The index is
rebuilt from the current weights at every step that is a multiple of ``every`` (N) and carries a
``version`` (0 = the initial weights, +1 per refresh) and the step whose weights embedded it; the joint
spec logs both for every step (``index_version``, ``index_weights_step`` in ``metrics.jsonl``).

Two ways to refresh:

* :class:`SyncRefresh` — all training ranks stop and re-embed: each data-parallel rank embeds its
  contiguous slice of the evidence (tensor-parallel ranks of one replica embed the same slice together),
  the slices are all-gathered over the data-parallel group, and every rank builds the same faiss index. The
  steps after a multiple of N retrieve from the weights of that step.
* :class:`AsyncRefresh` + :func:`indexer_loop` — as in EMDR2, ``R`` separate indexer ranks only embed. At a
  multiple of N, training rank 0 broadcasts the context tower's weights over a bridge group spanning every
  rank; the indexers embed the evidence (sharded over the R indexers, gathered among them) while the
  trainers keep training, and broadcast the embeddings back; the trainers swap the new index in at the next
  multiple of N (waiting there if the indexers are slower than N steps, so runs stay reproducible). The
  index used between steps 2N·j… is therefore one period staler than in the synchronous mode. With
  ``wait=True`` the trainers block right after sending until the embeddings arrive and swap at once, which
  is the synchronous schedule computed on other ranks (the test that the two agree).

Roles (:func:`split_roles`): the job's first ``world − R`` ranks train, the last R index. The default
process group is re-created per role (trainers only / indexers only) from the launcher's store, so the
shared trainer, optimizer and checkpoint code see a world of trainers and need no change; the bridge is a
gloo group over all ranks built on the same store.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from mwb.core.parallel.dims import LayoutError

from ..index import DenseIndex, embed_passages, shard_bounds


@dataclass(frozen=True)
class RefreshConfig:
    every: int = 0          # re-embed the evidence every N optimizer steps (0: never, keep version 0)
    indexer_ranks: int = 0  # R > 0: asynchronous refresh on R extra ranks
    wait: bool = False      # asynchronous: block until the indexers deliver and swap at once (= sync schedule)
    batch_size: int = 64    # passages per embedding forward

    def __post_init__(self) -> None:
        if self.every < 0 or self.indexer_ranks < 0:
            raise LayoutError("--refresh-every and --indexer-ranks cannot be negative")
        if self.indexer_ranks and not self.every:
            raise LayoutError("--indexer-ranks needs --refresh-every N > 0 (there is nothing to re-embed)")


@dataclass
class VersionedIndex:
    """A faiss index over the evidence, the refresh that made it and the step whose weights embedded it."""
    index: DenseIndex
    version: int
    weights_step: int
    embeddings: np.ndarray

    def search(self, queries: np.ndarray, k: int):
        return self.index.search(queries, k)


def make_index(emb: np.ndarray, version: int, weights_step: int) -> VersionedIndex:
    return VersionedIndex(DenseIndex.build(np.ascontiguousarray(emb, dtype=np.float32)), version, weights_step,
                          emb)


def embed_sharded(encoder, tok, evidence, rcfg, rank: int, world: int, group, device="cpu",
                  batch_size: int = 64) -> np.ndarray:
    """``[N, d]`` context embeddings of the whole evidence: this rank embeds slice ``rank`` of ``world``,
    the slices are all-gathered over ``group`` (same result on every member)."""
    was_training = encoder.training
    encoder.eval()
    lo, hi = shard_bounds(len(evidence), rank, world)
    emb = embed_passages(encoder, tok, evidence.titles[lo:hi], evidence.texts[lo:hi], rcfg, batch_size, device,
                         progress=False)
    encoder.train(was_training)
    if world == 1:
        return emb
    per = shard_bounds(len(evidence), 0, world)[1]
    buf = torch.zeros(per, emb.shape[1])
    buf[: hi - lo] = torch.from_numpy(emb)
    parts = [torch.zeros_like(buf) for _ in range(world)]
    dist.all_gather(parts, buf, group=group)
    return np.concatenate([parts[r][: b - a].numpy() for r, (a, b) in
                           enumerate(shard_bounds(len(evidence), r, world) for r in range(world))])


class SyncRefresh:
    """Every training rank re-embeds at multiples of N (sharded over data-parallel ranks, gathered)."""

    def __init__(self, cfg: RefreshConfig, tok, evidence, rcfg, state, device="cpu") -> None:
        self.cfg, self.tok, self.evidence, self.rcfg, self.device = cfg, tok, evidence, rcfg, device
        self.rank, self.world, self.group = state.dp_rank, state.dp_size, state.dp_group
        self.current: Optional[VersionedIndex] = None
        self.seconds = 0.0

    def _build(self, retriever, step: int, version: int) -> VersionedIndex:
        t0 = time.perf_counter()
        emb = embed_sharded(retriever, self.tok, self.evidence, self.rcfg, self.rank, self.world, self.group,
                            self.device, self.cfg.batch_size)
        self.current = make_index(emb, version, step)
        self.seconds += time.perf_counter() - t0
        return self.current

    def start(self, retriever, step: int = 0) -> VersionedIndex:
        """The index for the steps after ``step`` (a resumed run continues the version count)."""
        version = step // self.cfg.every if self.cfg.every else 0
        return self._build(retriever, step, version)

    def after_step(self, retriever, step: int) -> Optional[VersionedIndex]:
        """A new index when ``step`` is a multiple of N, else None."""
        if not self.cfg.every or step % self.cfg.every:
            return None
        return self._build(retriever, step, self.current.version + 1)

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------- asynchronous indexers


@dataclass
class Roles:
    indexer: bool
    trainers: int
    indexers: int
    bridge: object      # gloo process group over every rank (global ranks)
    rank: int           # global rank


def split_roles(indexer_ranks: int, timeout_s: float) -> Roles:
    """Turn the launcher's group of ``world`` ranks into trainers (first ``world − R``) and indexers (last
    R): the default group is re-created per role on the launcher's store, the bridge spans all ranks."""
    from torch.distributed.distributed_c10d import _get_default_store  # the store the launcher set up

    if not dist.is_initialized():
        raise LayoutError(f"--indexer-ranks {indexer_ranks} needs more than one rank: use --nproc N")
    world, rank = dist.get_world_size(), dist.get_rank()
    if indexer_ranks >= world:
        raise LayoutError(f"--indexer-ranks {indexer_ranks} leaves no training rank out of {world}; "
                          f"use --nproc {indexer_ranks + 1} or more")
    store = _get_default_store()
    dist.destroy_process_group()
    trainers = world - indexer_ranks
    timeout = datetime.timedelta(seconds=timeout_s)
    indexer = rank >= trainers
    role = "e2e-index" if indexer else "e2e-train"
    dist.init_process_group("gloo", store=dist.PrefixStore(role, store), rank=rank - trainers if indexer else rank,
                            world_size=indexer_ranks if indexer else trainers, timeout=timeout)
    bridge = dist.ProcessGroupGloo(dist.PrefixStore("e2e-bridge", store), rank, world, timeout)
    return Roles(indexer, trainers, indexer_ranks, bridge, rank)


def _broadcast(bridge, tensor: torch.Tensor, root: int):
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = root, 0
    return bridge.broadcast([tensor], opts)


def flat_weights(tower) -> torch.Tensor:
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in tower.parameters()])


def load_flat_weights(tower, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in tower.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p).to(p.dtype))
            offset += n


STOP, EMBED = 0.0, 1.0


def indexer_loop(roles: Roles, encoder, tok, evidence, rcfg, device="cpu", batch_size: int = 64,
                 say=lambda *a, **k: None) -> int:
    """An indexer rank's whole job: receive context-tower weights, embed its share of the evidence, gather
    among the indexers, send the embeddings to the trainers; until the trainers say stop. Returns the
    number of refreshes done."""
    tower = encoder.context_tower
    buf = flat_weights(tower)
    irank = roles.rank - roles.trainers
    done = 0
    while True:
        head = torch.zeros(2, dtype=torch.float64)
        _broadcast(roles.bridge, head, 0).wait()
        if head[0].item() == STOP:
            return done
        _broadcast(roles.bridge, buf, 0).wait()
        load_flat_weights(tower, buf)
        t0 = time.perf_counter()
        emb = embed_sharded(encoder, tok, evidence, rcfg, irank, roles.indexers, None, device, batch_size)
        _broadcast(roles.bridge, torch.from_numpy(np.ascontiguousarray(emb)), roles.trainers).wait()
        done += 1
        say(f"mwb: indexer re-embedded {len(evidence)} passages with the weights of step {int(head[1])} "
            f"in {time.perf_counter() - t0:.1f} s")


class AsyncRefresh:
    """The training ranks' side of the asynchronous refresh (see the module docstring for the schedule)."""

    def __init__(self, cfg: RefreshConfig, roles: Roles, state, n_passages: int, dim: int, total_steps: int) -> None:
        if state.tp_size > 1 or state.pp_size > 1:
            raise LayoutError("asynchronous index refresh (--indexer-ranks) sends the whole context tower "
                              "from training rank 0: use --tp 1 --pp 1 with it")
        self.cfg, self.roles, self.total = cfg, roles, total_steps
        self.n, self.dim = n_passages, dim
        self.current: Optional[VersionedIndex] = None
        self._pending = None  # (work, buffer, weights step)
        self.seconds = 0.0    # time the trainers spent waiting for indexers

    def _send(self, retriever, step: int) -> None:
        r = self.roles
        head = torch.tensor([EMBED, float(step)], dtype=torch.float64)
        _broadcast(r.bridge, head, 0).wait()
        flat = flat_weights(retriever.context_tower) if r.rank == 0 else \
            torch.zeros(sum(p.numel() for p in retriever.context_tower.parameters()))
        _broadcast(r.bridge, flat, 0).wait()
        out = torch.zeros(self.n, self.dim)
        self._pending = (_broadcast(r.bridge, out, r.trainers), out, step)

    def _receive(self, version: int) -> VersionedIndex:
        work, out, step = self._pending
        t0 = time.perf_counter()
        work.wait()
        self.seconds += time.perf_counter() - t0
        self._pending = None
        self.current = make_index(out.numpy(), version, step)
        return self.current

    def start(self, retriever, step: int = 0) -> VersionedIndex:
        self._send(retriever, step)
        return self._receive(step // self.cfg.every)

    def after_step(self, retriever, step: int) -> Optional[VersionedIndex]:
        if step % self.cfg.every:
            return None
        if self.cfg.wait:
            self._send(retriever, step)
            return self._receive(self.current.version + 1)
        new = self._receive(self.current.version + 1) if self._pending is not None else None
        if step < self.total:  # weights for the index swapped in at the next multiple
            self._send(retriever, step)
        return new

    def close(self) -> None:
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None
        _broadcast(self.roles.bridge, torch.tensor([STOP, 0.0], dtype=torch.float64), 0).wait()
