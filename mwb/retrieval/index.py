"""Dense index: embed an evidence corpus in shards across ranks, cache the embeddings, search with faiss.

Embeddings are the expensive artefact (DPR's 21M Wikipedia passages take GPU-hours), so they are cached
under ``$MWB_CACHE/retrieval/emb-<key>/`` where the key hashes everything that determines them: the encoder's
weights (a hash of its parameters, whatever file format they came from), its bi-encoder settings (pooling,
normalisation, context length), the tokenizer files and the evidence file's content. A later run with the
same inputs, whatever its ``--out``, reuses them and says so.

Sharding follows DPR's ``generate_dense_embeddings``: rank r embeds the contiguous slice r of the corpus and
writes ``shard_r.npy``; rank 0 concatenates the shards into one ``embeddings.npy`` (memory-mapped, so the
corpus never has to fit twice) and renames the directory into place, so a half-written entry is never
mistaken for a finished one. Within a shard, passages are embedded in length-sorted batches (less padding;
with the padding mask the embedding of a passage does not depend on its batch).

The index is ``IndexFlatIP`` (exact inner product) by default; ``ivf`` (``IndexIVFFlat``, ``nlist`` cells,
``nprobe`` probed) and ``hnsw`` (``IndexHNSWFlat``) trade exactness for speed on large corpora. faiss is
imported only here and only when needed; faiss-gpu is used when it is installed and a GPU is visible. Built
indexes are cached next to the embeddings they index.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
from typing import Optional

import numpy as np

from mwb.core.atomic import atomic_open, commit_file, fsync_file
from mwb.core.data.cache import cache_root, digest, file_digest, file_lock, log

from .inputs import context_ids, pad_batch

INDEX_KINDS = ("flat", "ivf", "hnsw")
_VERSION = 1  # bump when the embedding procedure changes


def retrieval_cache(cache_dir: Optional[str] = None) -> str:
    return os.path.join(cache_root(cache_dir), "retrieval")


def evidence_digest(path: str, cache_dir: Optional[str] = None) -> str:
    """sha256 of the evidence file, memoised by (path, size, mtime) because DPR's corpus is 13 GB."""
    path = os.path.abspath(path)
    st = os.stat(path)
    memo_path = os.path.join(retrieval_cache(cache_dir), "file_digests.json")
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    try:
        with open(memo_path) as f:
            memo = json.load(f)
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    value = file_digest(path)
    memo[key] = value
    with atomic_open(memo_path, "w", per_process=True) as f:  # other processes may rewrite the memo at once
        json.dump(memo, f)
    return value


def model_fingerprint(model) -> str:
    """A hash of every parameter's name, shape, dtype and bytes: the weights, whatever their file format."""
    import torch

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = p.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
    return h.hexdigest()


def tokenizer_fingerprint(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    files = [os.path.join(path, n) for n in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    return digest([file_digest(f) for f in files if os.path.isfile(f)])


def embedding_key(model, rcfg, tokenizer_path, evidence_path, cache_dir=None) -> str:
    return digest({"v": _VERSION, "model": model_fingerprint(model), "pooling": rcfg.pooling,
                   "normalize": rcfg.normalize, "context_length": rcfg.context_length,
                   "tokenizer": tokenizer_fingerprint(tokenizer_path),
                   "evidence": evidence_digest(evidence_path, cache_dir)})


def _barrier(world: int, group=None) -> None:
    if world > 1:
        import torch.distributed as dist
        dist.barrier(group=group)


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    per = math.ceil(n / world)
    return min(rank * per, n), min((rank + 1) * per, n)


def embed_passages(model, tok, titles, texts, rcfg, batch_size: int = 64, device="cpu",
                   progress: bool = True, desc: str = "embed") -> np.ndarray:
    """fp32 ``[n, d]`` context embeddings of the given passages, in input order."""
    import torch

    ids = context_ids(tok, titles, texts, rcfg.context_length)
    order = np.argsort([len(s) for s in ids], kind="stable")
    out = np.zeros((len(ids), model.dim), dtype=np.float32)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(ids), desc=desc, unit="psg", file=sys.stderr, dynamic_ncols=True, disable=None)
    pad = tok.pad if tok.pad is not None else 0
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            rows = order[start:start + batch_size]
            tokens, mask = pad_batch([ids[i] for i in rows], pad)
            emb = model.embed_contexts(torch.as_tensor(tokens, device=device), torch.as_tensor(mask, device=device))
            out[rows] = emb.float().cpu().numpy()
            if bar is not None:
                bar.update(len(rows))
    if bar is not None:
        bar.close()
    return out


def embed_evidence(model, tok, evidence, rcfg, key: str, cache_dir: Optional[str] = None, batch_size: int = 64,
                   device="cpu", rank: int = 0, world: int = 1, group=None,
                   progress: bool = True) -> tuple[np.ndarray, str, bool]:
    """``(embeddings [N, d] memory-mapped, cache directory, reused)``; every rank calls it with the same key."""
    root = retrieval_cache(cache_dir)
    final = os.path.join(root, f"emb-{key[:24]}")
    done = os.path.join(final, "embeddings.npy")
    if os.path.isfile(done):
        if rank == 0:
            log(f"reusing cached passage embeddings: {final}")
        return np.load(done, mmap_mode="r"), final, True
    tmp = os.path.join(root, f".emb-{key[:24]}.building")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    _barrier(world, group)
    lo, hi = shard_bounds(len(evidence), rank, world)
    emb = embed_passages(model, tok, evidence.titles[lo:hi], evidence.texts[lo:hi], rcfg, batch_size, device,
                         progress=progress and rank == 0, desc=f"embed passages (rank 0 of {world})"
                         if world > 1 else "embed passages")
    np.save(os.path.join(tmp, f"shard_{rank:05d}.npy"), emb)
    _barrier(world, group)
    if rank == 0:
        with file_lock(os.path.join(root, f".emb-{key[:24]}.lock")):
            if not os.path.isfile(done):
                out = np.lib.format.open_memmap(os.path.join(tmp, "embeddings.npy"), mode="w+",
                                                dtype=np.float32, shape=(len(evidence), model.dim))
                for r in range(world):
                    a, b = shard_bounds(len(evidence), r, world)
                    out[a:b] = np.load(os.path.join(tmp, f"shard_{r:05d}.npy"))
                out.flush()
                del out
                for r in range(world):
                    os.remove(os.path.join(tmp, f"shard_{r:05d}.npy"))
                fsync_file(os.path.join(tmp, "embeddings.npy"))
                with atomic_open(os.path.join(tmp, "meta.json"), "w") as f:
                    json.dump({"key": key, "evidence": evidence.path, "passages": len(evidence),
                               "dim": model.dim, "world_size": world}, f, indent=1)
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
                log(f"cached passage embeddings: {final}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    _barrier(world, group)
    return np.load(done, mmap_mode="r"), final, False


# ------------------------------------------------------------------------------------------- faiss


def _faiss():
    try:
        import faiss
    except ImportError:
        from mwb.core.errors import MwbError
        raise MwbError("dense retrieval needs faiss: pip install faiss-cpu (or faiss-gpu)") from None
    return faiss


def _use_gpu(faiss) -> bool:
    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:
        return False


class DenseIndex:
    """A faiss inner-product index over passage embeddings (row i = evidence passage i)."""

    def __init__(self, index, kind: str) -> None:
        self.cpu_index, self.kind = index, kind
        self.index = index
        faiss = _faiss()
        if kind != "hnsw" and _use_gpu(faiss):  # HNSW has no GPU version
            self.index = faiss.index_cpu_to_all_gpus(index)

    @property
    def ntotal(self) -> int:
        return int(self.cpu_index.ntotal)

    @classmethod
    def build(cls, emb: np.ndarray, kind: str = "flat", nlist: Optional[int] = None, nprobe: int = 16,
              hnsw_m: int = 32, ef_search: int = 128, add_batch: int = 65536) -> "DenseIndex":
        faiss = _faiss()
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind '{kind}' (use {', '.join(INDEX_KINDS)})")
        n, d = emb.shape
        if kind == "flat":
            index = faiss.IndexFlatIP(d)
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = ef_search
        else:
            nlist = nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(np.ascontiguousarray(emb, dtype=np.float32))
            index.nprobe = min(nprobe, nlist)
        for start in range(0, n, add_batch):
            index.add(np.ascontiguousarray(emb[start:start + add_batch], dtype=np.float32))
        return cls(index, kind)

    def search(self, queries: np.ndarray, k: int, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """(scores, passage rows), both ``[n, min(k, ntotal)]``, best first."""
        k = min(int(k), self.ntotal)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores, ids = [], []
        for start in range(0, len(queries), batch_size):
            s, i = self.index.search(queries[start:start + batch_size], k)
            scores.append(s)
            ids.append(i)
        if not scores:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return np.concatenate(scores), np.concatenate(ids).astype(np.int64)

    def save(self, path: str) -> str:
        faiss = _faiss()
        tmp = f"{path}.{os.getpid()}.partial"
        faiss.write_index(self.cpu_index, tmp)
        commit_file(tmp, path)
        return path

    @classmethod
    def load(cls, path: str, kind: str) -> "DenseIndex":
        return cls(_faiss().read_index(path), kind)


def cached_index(emb: np.ndarray, emb_dir: str, kind: str = "flat", rank: int = 0, **params) -> tuple[DenseIndex, bool]:
    """The index over ``emb`` stored in ``emb_dir`` (built and saved by rank 0 if missing); (index, reused)."""
    # only what changes the stored index names the file (nprobe / efSearch are set at search time)
    tag = "-".join(f"{k}{v}" for k, v in sorted(params.items()) if v is not None and k in ("nlist", "hnsw_m"))
    path = os.path.join(emb_dir, f"index-{kind}{'-' + tag if tag else ''}.faiss")
    if os.path.isfile(path):
        if rank == 0:
            log(f"reusing cached faiss index: {path}")
        raw = _faiss().read_index(path)
        if kind == "ivf" and params.get("nprobe"):
            raw.nprobe = min(int(params["nprobe"]), raw.nlist)
        if kind == "hnsw" and params.get("ef_search"):
            raw.hnsw.efSearch = int(params["ef_search"])
        return DenseIndex(raw, kind), True
    idx = DenseIndex.build(emb, kind, **{k: v for k, v in params.items() if v is not None})
    if rank == 0:
        idx.save(path)
        log(f"built faiss {kind} index over {idx.ntotal} passages: {path}")
    return idx, False
