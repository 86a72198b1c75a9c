"""Open-domain QA retrieval accuracy (``mwb eval qa``): DPR (dense) against BM25 on NQ-open style questions.

For each question the retriever returns the top-k passages of the evidence corpus, and the question counts
as answered at k when one of them contains an answer by DPR's rules (:mod:`mwb.retrieval.matching`).
Metrics are ``<retriever>_top<k>`` for k in ``--top-k`` (default 1, 5, 20, 100, as in the DPR paper) plus
``num_questions``; without ``--retriever`` both retrievers run on the same corpus and questions and a
side-by-side table is printed. ``--retriever random`` is the no-retrieval control. Default questions: the
real DPR questions the bundled evidence can answer (``real_questions.jsonl.gz``; ``--limit N`` for fewer).
The retrieval system (index, caches) is :mod:`mwb.retrieval.qa_system`.

``--reader C`` (an extractive BERT, FiD T5 or causal GPT reader, :mod:`mwb.retrieval.readers`) also answers
every question from each retriever's top ``--reader-k`` passages: ``<retriever>_exact_match`` and
``<retriever>_f1`` (SQuAD normalisation, best over the gold answers). ``--checkpoint`` naming a joint
``mwb finetune e2e-qa`` run evaluates its retriever and, unless ``--reader`` says otherwise, its reader;
``--reader RUN`` takes a joint run's reader.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from mwb.core.config import ConfigError
from mwb.evaluation.evaluator import dp_coords
from mwb.evaluation.metrics import squad_exact_match, squad_f1, squad_scores
from mwb.retrieval.matching import MATCH_MODES, parse_ks, top_k_accuracy
from mwb.retrieval.readers.base import ReaderConfig
from mwb.retrieval.readers.loading import joint_run_parts, load_reader
from mwb.retrieval.qa_system import CONTROLS, RETRIEVERS, QASystem, build_system, default_encoder, format_table
from mwb.retrieval.inputs import BUNDLED_REAL_QUESTIONS, read_questions

from ..api.base import Option, Task
from ..api.records import unique
from ..api.registry import register
from ..api.objectives import CUSTOM


@register("qa", "odqa")
class QATask(Task):
    description = "open-domain QA retrieval: DPR (dense, faiss) and BM25 top-k accuracy on NQ-open style questions"
    objective = CUSTOM
    default_data = BUNDLED_REAL_QUESTIONS  # the real DPR questions the bundled evidence can answer
    options = {
        "retriever": Option(str, None, "dpr, bm25 or random (a control) (default: dpr and bm25, side by side)"),
        "evidence": Option(str, None, "evidence TSV: id<TAB>text<TAB>title (default: bundled Wikipedia sample)"),
        "questions": Option(str, None, "questions: question<TAB>[\"answer\", ...] TSV/CSV or jsonl (= --data)"),
        "top_k": Option(str, "1,5,20,100", "comma-separated k for top-k accuracy"),
        "match": Option(str, "string", choices=MATCH_MODES, help="answer matching: string (DPR tokens) or regex"),
        "index": Option(str, "flat", choices=("flat", "ivf", "hnsw"), help="faiss index: flat (exact), ivf or hnsw"),
        "nprobe": Option(int, 16, low=1, help="IVF cells probed per query"),
        "batch_size": Option(int, 64, low=1, help="passages or questions per forward pass"),
        "query_length": Option(int, None, low=1, help="question tokens (default: the encoder's)"),
        "context_length": Option(int, None, low=1, help="passage tokens (default: the encoder's)"),
        "reader": Option(str, None, "reader checkpoint (BERT, T5 FiD, GPT, or a joint e2e-qa run): EM/F1"),
        "reader_k": Option(int, 5, low=1, help="passages the reader reads per question"),
        "reader_length": Option(int, 192, low=1, help="reader tokens per question + passage"),
        "answer_length": Option(int, 16, low=1, help="reader answer tokens (FiD, causal) / longest span (extractive)"),
    }

    @classmethod
    def default_checkpoint(cls, say: Callable[[str], None] = print) -> str:
        return default_encoder(say)

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        r = self.opts["retriever"]
        if r is not None and r not in RETRIEVERS + CONTROLS:
            raise ConfigError(f"--retriever must be one of {', '.join(RETRIEVERS + CONTROLS)}, got '{r}'")
        if self.opts["reader_k"] < 1:
            raise ConfigError("--reader-k must be at least 1")
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
        rank, world, group = dp_coords()
        joint = joint_run_parts(checkpoint) if checkpoint else None
        if joint is not None:  # a joint e2e-qa run: its retriever, and its reader unless --reader is given
            checkpoint = joint[0]
            self.decide(reader=self.option("reader") or joint[1])
        cfg, system = build_system(self.opts, self.retrievers, checkpoint, tokenizer, device, rank, world, group)
        system.reader = None
        if system.dpr_encoder is not None:
            self.decide(dpr_encoder=system.dpr_encoder)
        if self.option("reader"):
            path = (joint_run_parts(self.option("reader")) or (None, self.option("reader")))[1]
            rcfg = ReaderConfig(seq_length=self.opts["reader_length"], max_answer_tokens=self.opts["answer_length"],
                                answer_length=self.opts["answer_length"])
            system.reader = load_reader(path, device or "cpu", rcfg)
            self.decide(reader_kind=system.reader.kind)
        return cfg, system

    def build(self, examples, lm):
        self.examples = examples
        self.items = [{"question": e["question"], "answers": list(e["answers"])} for e in examples]
        return self.items

    def run(self, lm: QASystem, items):
        kmax = max(self.ks)
        questions = [it["question"] for it in items]
        found = {}
        for name, retriever in lm.retrievers.items():
            _, rows = retriever.search(questions, kmax)
            found[name] = rows
        results = [{} for _ in items]
        answers = [it["answers"] for it in items]
        for name, rows in found.items():  # passages tokenised once, answers once per question
            for res, row, hit in zip(results, rows, lm.matcher.first_hits(answers, rows)):
                top = [int(r) for r in row if r >= 0]
                res[name] = hit
                res[f"{name}_top1_id"] = lm.evidence.ids[top[0]] if top else None
        if lm.reader is not None:
            for name, rows in found.items():
                for res, answer in zip(results, self.read_answers(lm, questions, rows)):
                    res[f"{name}_answer"] = answer
        return results

    def read_answers(self, lm: QASystem, questions: list[str], rows) -> list[str]:
        """The reader's answers from each question's top ``--reader-k`` passages, a batch at a time."""
        ev, k, bs = lm.evidence, self.opts["reader_k"], max(1, self.opts["batch_size"] // 8)
        docs = [[{"id": ev.ids[r], "title": ev.titles[r], "text": ev.texts[r]} for r in row[:k] if r >= 0]
                for row in rows]
        return [a for s in range(0, len(questions), bs) for a in lm.reader.predict(questions[s:s + bs], docs[s:s + bs])]

    def aggregate(self, results):
        metrics = {}
        names = [r for r in RETRIEVERS + CONTROLS if results and r in results[0]]
        for name in names:
            acc = top_k_accuracy([r[name] for r in results], self.ks)
            for k, v in acc.items():
                metrics[f"{name}_top{k}"] = v
            if f"{name}_answer" in results[0]:
                scores = squad_scores([r[f"{name}_answer"] for r in results], [it["answers"] for it in self.items])
                metrics.update({f"{name}_{m}": v for m, v in scores.items()})
        metrics["num_questions"] = len(results)
        if os.environ.get("RANK", "0") in ("", "0"):
            print(format_table(metrics, names, self.ks), file=sys.stderr, flush=True)
        return metrics

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per question and retriever: ``<retriever>_top<k>`` 0/1 (an answer within the top k) for each k,
        and with a reader ``<retriever>_exact_match`` / ``<retriever>_f1`` (0–100, as the corpus numbers are
        reported); ``prediction`` holds each retriever's first-hit rank, top passage id and answer. Id: the
        question's own ``id`` field, else ``q<line index>`` in the questions file."""
        ids = unique([f"{e['id']}" if e.get("id") not in (None, "") else f"q{n}" for n, e in enumerate(examples)])
        names = [r for r in RETRIEVERS + CONTROLS if results and r in results[0]]
        out = []
        for rid, res, e in zip(ids, results, examples):
            rec = {"id": rid, "prediction": {n: {"first_hit": res[n], "top1_id": res[f"{n}_top1_id"],
                                                 **({"answer": res[f"{n}_answer"]} if f"{n}_answer" in res else {})}
                                             for n in names},
                   "gold": list(e["answers"])}
            for n in names:
                for k in self.ks:
                    rec[f"{n}_top{k}"] = int(res[n] is not None and res[n] < k)
                if f"{n}_answer" in res:
                    rec[f"{n}_exact_match"] = 100.0 * squad_exact_match(res[f"{n}_answer"], e["answers"])
                    rec[f"{n}_f1"] = 100.0 * squad_f1(res[f"{n}_answer"], e["answers"])
            out.append(rec)
        return out
