"""Which similarity the joint objectives train: the starting retriever's own, kept in the retriever it saves.

A bi-encoder is trained for one similarity: its towers' pooled output (L2-normalised or not), questions cut
at ``query_length`` tokens and passages at ``context_length``, compared by inner product and divided by its
score divisor (√h, a temperature, or 1). ICT from scratch trains cosine / 0.05, DPR a raw inner product,
sentence-transformers models cosine × 20. Retrieval ranks passages by the inner product alone, so the
divisor does not change which passages come first; the normalisation and the lengths do. The joint losses
take a softmax over the scores of the top-k passages, so the divisor sets how peaked p(z|q) is.

EMDR2 writes its score as q·d/√h on raw embeddings. Joint training used to impose that on every start (and
the run's ``--seq-length`` as the passage length), so a retriever trained for cosine / temperature was
scored, trained and saved with a similarity it had never been trained for: a run at lr 0, weights
unchanged, lost most of its held-out top-k. The joint run now keeps the start's settings whole, so a run
at lr 0 evaluates exactly as its start. Only a start without retrieval training of its own (a plain BERT,
whose settings are defaults rather than something it learned) takes EMDR2's √h: that is the one change,
said in one line on stderr and recorded in the plan (``results.json``) and in the saved
``retriever/biencoder/biencoder.json``. It leaves the ranking unchanged. The run's ``train.seq_length``
is the retriever's passage length too (:func:`keep_passage_length`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ..biencoder import RetrievalConfig


@dataclass(frozen=True)
class JointScoring:
    """The settings the joint run builds, trains and saves its retriever with, and what it changed."""
    rcfg: RetrievalConfig
    description: str   # the similarity in words (recorded in the plan)
    change: str        # "" when the start's own settings are kept whole; else the one line that says why


def describe(rcfg: RetrievalConfig) -> str:
    """``cosine / 0.05 (mean pooling, questions 32 / passages 64 tokens)`` and the like."""
    sim = "cosine" if rcfg.normalize else "q·d"
    div = {"none": "", "sqrt": " / √h", "temperature": f" / {rcfg.temperature:g}"}[rcfg.score_scale]
    return (f"{sim}{div} ({rcfg.pooling} pooling, questions {rcfg.query_length} / passages "
            f"{rcfg.context_length} tokens)")


def joint_scoring(source) -> JointScoring:
    """The scoring of the joint run that starts from ``source`` (an :class:`~..loading.EncoderSource`)."""
    if source.own_settings:  # a bi-encoder, or a sentence-transformers model: it was trained for these
        return JointScoring(source.rcfg, f"{describe(source.rcfg)}: the starting retriever's own", "")
    rcfg = source.rcfg.replace(score_scale="sqrt")
    change = (f"mwb: {source.path} is a plain BERT without a retrieval scoring of its own: the joint losses "
              f"score it with EMDR2's {describe(rcfg)}, and its saved retriever records that")
    return JointScoring(rcfg, f"{describe(rcfg)}: EMDR2's, the start (a plain BERT) has none", change)


def keep_passage_length(cfg, plan):
    """``cfg`` with ``train.seq_length`` the retriever's passage length (``plan.rcfg``), which the joint run
    keeps as the retriever was trained (the reader has ``--reader-length``); a different ``--seq-length`` is
    said in one line."""
    from mwb.core.config import update

    length = plan.rcfg["context_length"]
    if cfg.train.seq_length == length:
        return cfg
    print(f"mwb: the retriever keeps the {length}-token passages it was trained with (not --seq-length "
          f"{cfg.train.seq_length}); the reader reads --reader-length tokens", file=sys.stderr)
    return update(cfg, {"train": {"seq_length": length}})
