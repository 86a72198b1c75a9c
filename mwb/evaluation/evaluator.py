"""Run a task over data-parallel ranks: every rank builds the same items, takes every ``dp``-th one,
runs its share, and the per-item results are gathered back into item order before aggregation.

Why strided shards and ordered gathering: the metrics must not depend on the number of ranks (a sum of
floats in a different order could change the last digit; putting results back in item order makes the
aggregation identical to the one-process run), and striding balances long and short items.
Tensor-parallel ranks of one data-parallel rank process the same shard together (their forward passes
communicate), so only the data-parallel coordinates decide the sharding.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import torch.distributed as dist


def dp_coords(state=None) -> tuple[int, int, Any]:
    """(dp rank, dp size, process group for gathering) of this process.

    With a ParallelState its DP group is used; without one but inside an initialised process group every
    rank is a data-parallel replica (``mwb eval --nproc N``); otherwise one process."""
    if state is not None:
        return state.dp_rank, state.dp_size, state.dp_group
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size(), dist.group.WORLD
    return 0, 1, None


def gather_ordered(results: list, indices: list[int], total: int, rank: int, size: int, group) -> list:
    """Every rank's ``(index, result)`` pairs gathered over ``group`` and put back in index order."""
    pairs = list(zip(indices, results))
    if size > 1:
        parts: list = [None] * size
        dist.all_gather_object(parts, pairs, group=group)
        pairs = [p for part in parts for p in part]
    ordered: list = [None] * total
    for i, r in pairs:
        ordered[i] = r
    missing = [i for i, r in enumerate(ordered) if r is None]
    if missing:
        raise RuntimeError(f"evaluation lost results for items {missing[:5]}…")
    return ordered


def evaluate(task, lm, data: Optional[str] = None, state=None, limit: Optional[int] = None,
             records: bool = False) -> dict:
    """Metrics of ``task`` on ``data`` (or its bundled sample) for the model in ``lm``; same on every rank.

    Returns ``{"metrics": {...}, "num_items": N, "seconds": s}``. ``limit`` keeps the first N examples.
    ``records``: also ``"records"``, the task's per-item records of the gathered results (``task.score``
    gives them with the metrics) — in item order, so they do not depend on the number of ranks either — and
    the evaluated ``"examples"``."""
    t0 = time.perf_counter()
    examples = task.load(data)
    if limit:
        examples = examples[:limit]
    items = task.build(examples, lm)
    rank, size, group = dp_coords(state)
    indices = list(range(rank, len(items), size))
    results = task.run(lm, [items[i] for i in indices]) if indices else []
    ordered = gather_ordered(results, indices, len(items), rank, size, group)
    if records:  # the metrics and the records from one scoring of the results
        metrics, recs = task.score(ordered)
    else:
        metrics, recs = task.aggregate(ordered), None
    report = {"metrics": metrics, "num_items": len(items), "num_examples": len(examples),
              "seconds": round(time.perf_counter() - t0, 3), "dp_size": size}
    if records:
        report["records"], report["examples"] = recs, examples
    return report
