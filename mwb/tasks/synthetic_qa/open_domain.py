"""Open-domain QA with a BM25 retriever and an extractive ``squad`` reader: EM/F1 on real questions.

The experiment of the synthetic-QA issue: a reader trained on synthetic pairs over the bundled Wikipedia
evidence answers questions written by people. For each question BM25 (:mod:`mwb.retrieval.bm25`) returns
the top-k passages; the reader scores spans in each (doc-stride windows, n-best, as ``squad`` decodes) and
the answer is the span with the highest start + end logit over all k passages. EM/F1 are the official
SQuAD ones against the question's answer list; ``retrieval_top{k}`` is the share of questions with an
answer string (DPR's rule) in a retrieved passage, the ceiling of any reader. ``untrained`` means the base
encoder with a freshly initialised span head (seeded by ``init_seed``), the floor. Each per-question record
carries an ``id`` (the question's own, else ``q<line index>`` in the questions file, so a sample keeps the ids
of the whole file) and its ``exact_match`` and ``f1`` on the 0–100 scale of the corpus numbers, so two readers
are paired question by question (``mwb compare``).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from mwb.core.compose import full_state
from mwb.core.errors import CheckpointError, DataError
from mwb.core.parallel.state import single_process_state
from mwb.core.tokenizers import load_tokenizer
from mwb.evaluation.metrics import squad_exact_match, squad_f1, squad_scores
from mwb.retrieval.bm25 import BM25Retriever
from mwb.retrieval.matching import has_answer
from mwb.retrieval.inputs import BUNDLED_QUESTIONS, BUNDLED_REAL_QUESTIONS, read_evidence, read_questions

from ..api import encoder_objective
from ..api.encoder_model import build_task_model, load_weights
from ..squad.data import best_span, split_words
from ..squad.task import Squad


def load_reader(task: Squad, reader: str, base: str = "minilm-l6", seed: int = 1234) -> encoder_objective.EncoderRunner:
    """A fine-tuned ``squad`` checkpoint, or for ``untrained`` the ``base`` encoder with a fresh span head."""
    if reader != "untrained":
        return encoder_objective.load_model(task, reader)[1]
    cfg, vocab, tensors, tok = full_state(base)
    model = build_task_model(cfg.model, single_process_state(), vocab, "span", 2, seed)
    missing = load_weights(model, tensors, vocab, base, encoder_only=True)
    if missing:
        raise CheckpointError(f"{base} is not a BERT encoder: it lacks {', '.join(missing[:3])}")
    return encoder_objective.EncoderRunner(model.eval(), load_tokenizer(tok), task.option("seq_length"),
                                           task.opts["batch_size"])


def select_questions(questions: list[dict], titled: bool = False, sample: Optional[int] = None,
                     seed: int = 1) -> list[dict]:
    """Questions that name an article title (``names_title`` in the bundled real questions) when ``titled``;
    then ``sample`` of them drawn with ``seed``, kept in file order."""
    if titled:
        if questions and "names_title" not in questions[0]:
            raise DataError("--titled needs questions with a names_title field (the bundled real_questions)")
        questions = [q for q in questions if q["names_title"]]
    if sample and sample < len(questions):
        keep = sorted(np.random.default_rng(seed).choice(len(questions), size=sample, replace=False))
        questions = [questions[i] for i in keep]
    return questions


def open_domain_eval(reader: str, questions: str, evidence: str, top_k: int = 5, seq_length: int = 192,
                     limit: Optional[int] = None, base: str = "minilm-l6", titled: bool = False,
                     sample: Optional[int] = None, seed: int = 1,
                     init_seed: int = 1234) -> tuple[dict, list[dict]]:
    """``(metrics, per-question predictions)`` of BM25 top-``top_k`` + ``reader`` on ``questions``."""
    every = [{**q, "id": str(q.get("id") or f"q{i}")} for i, q in enumerate(read_questions(questions))]
    qs = select_questions(every, titled, sample, seed)
    qs = qs[:limit] if limit else qs
    ev = read_evidence(evidence)
    _, rows = BM25Retriever(ev).search([q["question"] for q in qs], top_k)
    task = Squad(seq_length=seq_length, batch_size=16)
    runner = load_reader(task, reader, base, init_seed)
    examples = []
    for i, q in enumerate(qs):
        for r in rows[i]:
            words, _ = split_words(ev.texts[r])
            examples.append({"id": f"{i}-{r}", "question": q["question"], "context": ev.texts[r], "words": words,
                             "answers": list(q["answers"]), "span": None, "q": i})
    features = task.features(examples, runner.tokenizer, runner.seq_length)
    outputs = encoder_objective.run(task, runner, features)
    by_example: dict = {}
    for out, feat in zip(outputs, features):
        by_example.setdefault(int(feat["example"]), []).append((out, feat))
    best: dict = {}
    for j, e in enumerate(examples):
        outs, feats = zip(*by_example[j])
        text, score, _ = best_span(list(outs), list(feats), e, task.opts["n_best"], task.opts["max_answer_tokens"])
        if score is not None and (e["q"] not in best or score > best[e["q"]][1]):
            best[e["q"]] = (text, score)
    preds = [best.get(i, ("", None))[0] for i in range(len(qs))]
    hits = [any(has_answer(q["answers"], ev.texts[r]) for r in rows[i]) for i, q in enumerate(qs)]
    metrics = {**squad_scores(preds, [q["answers"] for q in qs]),
               f"retrieval_top{top_k}": 100.0 * sum(hits) / max(len(qs), 1), "num_questions": len(qs)}
    per_question = [{"id": q["id"], "question": q["question"], "answers": list(q["answers"]), "prediction": p,
                     "retrieved": h, "exact_match": 100.0 * squad_exact_match(p, q["answers"]),
                     "f1": 100.0 * squad_f1(p, q["answers"])}
                    for q, p, h in zip(qs, preds, hits)]
    return metrics, per_question


def default_questions() -> str:
    """The real answerable questions over the bundled evidence when this checkout has them
    (``real_questions.jsonl.gz``), else the bundled questions written for mwb."""
    return BUNDLED_REAL_QUESTIONS if os.path.isfile(BUNDLED_REAL_QUESTIONS) else BUNDLED_QUESTIONS
