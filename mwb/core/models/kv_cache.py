"""A preallocated key/value cache for incremental decoding: per layer one ``[rows, kv_heads, capacity, head_dim]``
tensor for keys and one for values, written in place at each row's own length.

Why not grow by concatenation (:class:`~mwb.core.models.transformer.KVCache`): concatenating copies the whole
cache at every decoding step, and a left-padded batch forces every row to the longest row's length. Here
each row ``r`` holds exactly its own tokens at positions ``0 … lengths[r]-1``; a forward pass writes its new
keys and values at ``lengths[r] …`` and attends over the first ``max(lengths + new)`` positions under a mask
that gives every query the keys at or before its own position. Rows therefore join and leave a running batch
freely (continuous batching: :mod:`mwb.evaluation.batcher`), and a row computes what it computes alone.

A forward pass covers a contiguous range of rows (:meth:`begin`): decoding steps pass one token per row;
prefill passes give each row ``counts[r]`` tokens, left-padded to a common width, so every row's last real
token sits in the last column (``logits_to_keep = 1`` works). Pad columns write nothing and their outputs are
never read; they attend to key 0 at least, so they stay finite.

Storage is allocated on the first write of each layer with the shape, dtype and device of its keys, so under
tensor parallelism each rank holds only its own kv heads. Rows and capacity grow geometrically (a copy,
amortised over many steps) up to ``max_rows`` / ``max_capacity`` when given, or to exactly what is needed
when a token budget would be exceeded (:meth:`reserve`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch


def _grown(have: int, need: int, limit: Optional[int], quantum: int) -> int:
    """A new size for ``need`` (more than ``have``): doubled, rounded up to ``quantum``, at most ``limit``."""
    size = max(need, 2 * have)
    size = -(-size // quantum) * quantum
    return size if limit is None else max(need, min(size, limit))


class PreallocatedKVCache:
    """Per-row keys and values written in place (see the module docstring).

    ``lengths[r]``: tokens held by row ``r``. The caller brackets each model call with :meth:`begin` (which
    rows, how many new tokens each, the padded width; returns the position ids) and :meth:`commit`."""

    in_place = True  # how attention tells this cache from the concatenating one

    def __init__(self, rows: int = 0, capacity: int = 0, max_rows: Optional[int] = None,
                 max_capacity: Optional[int] = None) -> None:
        self.rows, self.capacity = rows, capacity
        self.max_rows, self.max_capacity = max_rows, max_capacity
        self.lengths = torch.zeros(rows, dtype=torch.long)
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self._span: Optional[tuple[int, int]] = None
        self._counts = self._qpos = self._valid = None
        self._dense = False
        self._keys = 0
        self._mask: Optional[torch.Tensor] = None
        self._index: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    # -------------------------------------------------------------------------------- one forward pass

    def begin(self, first: int, counts: Sequence[int], width: int) -> torch.Tensor:
        """Rows ``first … first+len(counts)-1`` receive ``counts[i]`` new tokens each (at most ``width``),
        left-padded to ``width`` columns. Returns their position ids ``[rows, width]`` (a pad column gets an
        earlier position of its row, so it stays within the model's positions)."""
        n = len(counts)
        counts_t = torch.as_tensor(list(counts), dtype=torch.long)
        if n == 0 or int(counts_t.max()) > width or int(counts_t.min()) < 0:
            raise ValueError(f"bad forward plan: counts {list(counts)} for width {width}")
        self._ensure_rows(first + n)
        lengths = self.lengths[first:first + n]
        col = torch.arange(width)
        qpos = lengths[:, None] + col[None, :] - (width - counts_t)[:, None]  # [n, width]; pads: before lengths
        self._valid = col[None, :] >= (width - counts_t)[:, None]
        self._dense = bool(self._valid.all())
        self._qpos = qpos.clamp(min=0)
        self._span, self._counts = (first, n), counts_t
        self._keys = max(1, int((lengths + counts_t).max()))
        self._ensure_capacity(self._keys)
        self._mask, self._index = None, None
        return self._qpos

    def commit(self) -> None:
        """The forward pass is done: each row now holds its new tokens."""
        first, n = self._span
        self.lengths[first:first + n] += self._counts
        self._span = None

    def _attention_mask(self, device) -> torch.Tensor:
        """``[rows, 1, width, keys]``: query ``i`` of row ``r`` sees keys ``0 … qpos[r, i]``."""
        if self._mask is None or self._mask.device != device:
            keys = torch.arange(self._keys)
            self._mask = (keys[None, None, :] <= self._qpos[:, :, None])[:, None].to(device)
        return self._mask

    def _write_index(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._index is None or self._index[0].device != device:
            first, n = self._span
            rows = torch.arange(first, first + n)[:, None].expand_as(self._qpos)
            valid = self._valid
            self._index = (rows[valid].to(device), self._qpos[valid].to(device), valid.to(device))
        return self._index

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write this pass's keys/values ``[rows, kv_heads, width, d]`` of ``layer`` in place; return the rows'
        keys and values over the positions this pass attends to, and the attention mask."""
        if self._span is None:
            raise RuntimeError("PreallocatedKVCache.update outside begin() … commit()")
        if layer not in self.k:
            shape = (self.rows, k.size(1), self.capacity, k.size(3))
            self.k[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.v[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        rows, pos, valid = self._write_index(k.device)
        kc, vc = self.k[layer], self.v[layer]
        if self._dense:  # every column is a real token (decoding): no boolean gather
            kc[rows, :, pos] = k.transpose(1, 2).reshape(-1, k.size(1), k.size(3))
            vc[rows, :, pos] = v.transpose(1, 2).reshape(-1, v.size(1), v.size(3))
        else:
            kc[rows, :, pos] = k.transpose(1, 2)[valid]
            vc[rows, :, pos] = v.transpose(1, 2)[valid]
        first, n = self._span
        return (kc[first:first + n, :, :self._keys], vc[first:first + n, :, :self._keys],
                self._attention_mask(k.device))

    # --------------------------------------------------------------------------------------- storage

    def _resize(self, rows: int, capacity: int) -> None:
        for store in (self.k, self.v):
            for layer, t in store.items():
                new = torch.zeros((rows, t.size(1), capacity, t.size(3)), dtype=t.dtype, device=t.device)
                r, c = min(rows, t.size(0)), min(capacity, t.size(2))
                new[:r, :, :c] = t[:r, :, :c]
                store[layer] = new
        lengths = torch.zeros(rows, dtype=torch.long)
        lengths[:min(rows, self.rows)] = self.lengths[:min(rows, self.rows)]
        self.rows, self.capacity, self.lengths = rows, capacity, lengths

    def reserve(self, rows: int, capacity: int, budget: Optional[int] = None) -> None:
        """Room for rows ``0 … rows-1`` holding up to ``capacity`` tokens each. Growing doubles a dimension
        (amortised copies) unless that would hold more than ``budget`` tokens in all: then the storage is cut
        to exactly what is asked (rows past ``rows`` are free slots, dropped)."""
        if rows <= self.rows and capacity <= self.capacity:
            return
        for need, limit, name in ((rows, self.max_rows, "rows"), (capacity, self.max_capacity, "tokens per row")):
            if limit is not None and need > limit:
                raise ValueError(f"the KV cache holds at most {limit} {name}, {need} asked for")
        new_rows = _grown(self.rows, rows, self.max_rows, 1) if rows > self.rows else self.rows
        new_cap = _grown(self.capacity, capacity, self.max_capacity, 64) if capacity > self.capacity else self.capacity
        if budget is not None and new_rows * new_cap > budget:
            new_rows = rows
            new_cap = max(capacity, min(new_cap, budget // rows))
        self._resize(new_rows, new_cap)

    def _ensure_rows(self, need: int) -> None:
        if need > self.rows:
            if self.max_rows is not None and need > self.max_rows:
                raise ValueError(f"the KV cache holds at most {self.max_rows} rows, {need} asked for")
            self._resize(_grown(self.rows, need, self.max_rows, 1), self.capacity)

    def _ensure_capacity(self, need: int) -> None:
        if need > self.capacity:
            if self.max_capacity is not None and need > self.max_capacity:
                raise ValueError(f"the KV cache holds at most {self.max_capacity} tokens per row, {need} asked for")
            self._resize(self.rows, _grown(self.capacity, need, self.max_capacity, 64))

    # ------------------------------------------------------------------------------- moving rows around

    def move(self, src: int, dst: int) -> None:
        """Row ``dst`` becomes a copy of row ``src`` (its tokens and length); ``src`` is left as it was."""
        if src == dst:
            return
        self._ensure_rows(max(src, dst) + 1)
        n = int(self.lengths[src])
        for store in (self.k, self.v):
            for t in store.values():
                t[dst, :, :n] = t[src, :, :n]
        self.lengths[dst] = n

    def swap(self, a: int, b: int) -> None:
        """Exchange rows ``a`` and ``b``."""
        if a == b:
            return
        n = int(max(self.lengths[a], self.lengths[b]))
        for store in (self.k, self.v):
            for t in store.values():
                tmp = t[a, :, :n].clone()
                t[a, :, :n] = t[b, :, :n]
                t[b, :, :n] = tmp
        self.lengths[[a, b]] = self.lengths[[b, a]]

    def reorder(self, rows: torch.Tensor) -> None:
        """Rows ``0 … len(rows)-1`` become copies of rows ``rows`` (in that order; repeats allowed), as beam
        search reorders its beams; rows past ``len(rows)`` are dropped (length 0)."""
        rows = rows.to(torch.long).cpu()
        m = rows.numel()
        n = int(self.lengths[rows].max()) if m else 0
        self._ensure_rows(m)
        for store in (self.k, self.v):
            for t in store.values():
                t[:m, :, :n] = t[rows.to(t.device), :, :n]
        self.lengths[:m] = self.lengths[rows].clone()
        self.lengths[m:] = 0

    def clear(self, row: int) -> None:
        """Row ``row`` holds nothing (its slot is reused)."""
        if row < self.rows:
            self.lengths[row] = 0
