"""The contextual knowledge ranker: a MiniLM bi-encoder trained on weak labels, keeping the top-N sentences.

Why weak labels: there is no gold "useful knowledge" for a story. MEGATRON-CNTRL scores each retrieved
knowledge sentence by its similarity to the *gold next sentence* under a sentence encoder (USE in the paper;
here the frozen all-MiniLM-L6-v2, ``minilm-l6``) and trains a BERT ranker to predict that from the *story so
far* only, which is all it sees when writing. mwb's ranker is the same MiniLM as one shared tower (mean
pooling, L2-normalised: cosine scores). Its loss, per context, is the cross-entropy of the softmax over the
candidates' scores / ``temperature`` against the candidate the weak labels rank first (the paper does not
give its loss; this listwise form is DPR's, with the other candidates of the same keywords as negatives).
Agreement with the weak labels on held-out stories is the overlap of the two top-N sets, divided by N; a
random ranking's expected overlap is N / number of candidates (the chance level reported next to it).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mwb.core.checkpoint.writer import write_model_checkpoint
from mwb.core.tokenizers import load_tokenizer
from mwb.retrieval.biencoder import RetrievalConfig
from mwb.retrieval.loading import biencoder_tensors, load_biencoder, open_source, write_config_file
from mwb.retrieval.inputs import context_ids, pad_batch, query_ids


# all-MiniLM-L6-v2's own settings (sentence-transformers: mean pooling, normalised), which the converted named
# model does not carry; the story so far (up to four sentences) as the query, a knowledge sentence as the context
RANKER_SETTINGS = RetrievalConfig(shared=True, pooling="mean", normalize=True, query_length=128, context_length=64)


@dataclass(frozen=True)
class RankerConfig:
    encoder: str = "minilm-l6"   # starting point and weak-label encoder
    steps: int = 40
    contexts_per_step: int = 8
    lr: float = 5e-5
    temperature: float = 0.05
    top_n: int = 3
    seed: int = 1234


class Ranker:
    """A bi-encoder that scores knowledge sentences against a story context (cosine)."""

    def __init__(self, path: str, device="cpu") -> None:
        source = open_source(path)
        rcfg = source.rcfg if source.kind == "mwb-biencoder" else RANKER_SETTINGS  # a trained ranker keeps its own
        self.source, self.model = load_biencoder(source, device=device, rcfg=rcfg)
        self.tok = load_tokenizer(self.source.tokenizer)
        self.rcfg, self.device = self.model.rcfg, device

    def _embed(self, texts: list[str], which: str, batch: int = 64) -> torch.Tensor:
        if which == "query":
            ids, fn = query_ids(self.tok, texts, self.rcfg.query_length), self.model.embed_queries
        else:
            ids, fn = context_ids(self.tok, [None] * len(texts), texts, self.rcfg.context_length), \
                self.model.embed_contexts
        out = []
        for i in range(0, len(ids), batch):
            t, m = pad_batch(ids[i:i + batch], self.tok.pad if self.tok.pad is not None else 0)
            out.append(fn(torch.as_tensor(t, device=self.device), torch.as_tensor(m, device=self.device)))
        return torch.cat(out) if out else torch.zeros(0, self.model.dim)

    @torch.no_grad()
    def embed(self, texts: list[str], which: str = "context") -> np.ndarray:
        self.model.eval()
        return self._embed(texts, which).float().cpu().numpy()

    def scores(self, queries: list[str], candidates: list[list[str]]) -> list[np.ndarray]:
        """Cosine of each query with each of its candidates (knowledge embedded once per distinct sentence)."""
        unique = sorted({c for cs in candidates for c in cs})
        emb = dict(zip(unique, self.embed(unique))) if unique else {}
        q = self.embed(queries, "query")
        return [np.array([float(q[i] @ emb[c]) for c in cs]) for i, cs in enumerate(candidates)]

    def top(self, queries: list[str], candidates: list[list[str]], n: int) -> list[list[str]]:
        """The ``n`` best candidates of each query, best first."""
        return [[cs[j] for j in np.argsort(-s, kind="stable")[:n]] for s, cs in
                zip(self.scores(queries, candidates), candidates)]

    def save(self, directory: str) -> str:
        with tempfile.TemporaryDirectory() as d:
            return write_model_checkpoint(directory, self.source.cfg, self.source.vocab_size,
                                          biencoder_tensors(self.model), overwrite=True,
                                          extra_files={"tokenizer": self.source.tokenizer,
                                                       "biencoder": write_config_file(self.rcfg, d)})


def weak_labels(encoder: Ranker, gold_next: list[str], candidates: list[list[str]]) -> list[np.ndarray]:
    """Cosine under the frozen sentence ``encoder`` between each candidate and its gold next sentence (both
    embedded as sentences; every distinct sentence once)."""
    unique = sorted({c for cs in candidates for c in cs} | set(gold_next))
    emb = dict(zip(unique, encoder.embed(unique)))
    return [np.array([float(emb[t] @ emb[c]) for c in cs]) for t, cs in zip(gold_next, candidates)]


def train_ranker(ranker: Ranker, examples: list[dict], cfg: RankerConfig, log=print) -> list[float]:
    """Train ``ranker`` in place on ``examples`` (``context``, ``candidates``, ``labels``: weak scores);
    returns the loss of every step."""
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    usable = [e for e in examples if len(e["candidates"]) >= 2]
    opt = torch.optim.AdamW(ranker.model.parameters(), lr=cfg.lr, weight_decay=0.01)
    losses = []
    for step in range(cfg.steps):
        batch = [usable[i] for i in rng.choice(len(usable), min(cfg.contexts_per_step, len(usable)), replace=False)]
        ranker.model.train()
        q = ranker._embed([e["context"] for e in batch], "query")
        k = ranker._embed([c for e in batch for c in e["candidates"]], "context")  # one pass for the batch
        loss, start = 0.0, 0
        for i, e in enumerate(batch):
            logits = (k[start:start + len(e["candidates"])] @ q[i]).float() / cfg.temperature
            start += len(e["candidates"])
            target = torch.tensor(int(np.argmax(e["labels"])))
            loss = loss + F.cross_entropy(logits[None], target[None])
        loss = loss / len(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        log(f"ranker step {step + 1}/{cfg.steps} loss {losses[-1]:.4f}")
    ranker.model.eval()
    return losses


def agreement(ranker: Ranker, examples: list[dict], n: int) -> dict:
    """Top-``n`` overlap of the ranker with the weak labels (mean over examples with more than ``n``
    candidates), and the chance level of a random ranking (mean of ``n / candidates``)."""
    ex = [e for e in examples if len(e["candidates"]) > n]
    if not ex:
        return {"top_n_agreement": float("nan"), "chance": float("nan"), "examples": 0}
    scores = ranker.scores([e["context"] for e in ex], [e["candidates"] for e in ex])
    agree = [len(set(np.argsort(-s, kind="stable")[:n]) & set(np.argsort(-np.asarray(e["labels"]),
                                                                          kind="stable")[:n])) / n
             for s, e in zip(scores, ex)]
    return {"top_n_agreement": float(np.mean(agree)),
            "chance": float(np.mean([n / len(e["candidates"]) for e in ex])), "examples": len(ex), "n": n}
