"""Open-domain QA reader on retrieved passages (``mwb finetune qa-reader``, ``mwb eval qa-reader``).

Data: questions in DPR's formats (``question<TAB>["answer", ...]`` or jsonl ``{"question", "answers"}``),
each with the top ``--top-k`` passages BM25 retrieves from the evidence (``--evidence``, DPR's ``id<TAB>text
<TAB>title`` TSV; default the bundled Wikipedia sample), fixed for the whole run — Sachan et al.'s reader
training before joint training. ``--passages random`` gives each question K passages drawn at random
instead (seeded per question): the control that says how much of the reader's EM the retriever earns.
Default questions: the bundled real DPR questions whose answer the evidence holds (``real_questions.jsonl.gz``),
``--max-questions`` (500) of them spread evenly over the file. Splits: ``train`` is four questions in five,
``dev`` every fifth, ``all`` everything (a file the reader never trained on).

Inputs/objective: the reader of ``--reader`` (:mod:`mwb.retrieval.readers`, trained on the shared trainer by
:mod:`mwb.retrieval.readers.training`): extractive (a BERT span reader; default start ``minilm-l6``), fid (T5
Fusion-in-Decoder; start from a T5 such as ``mwb pretrain t5``) or causal (a decoder-only LM answering after the
passages; default start ``smollm2-135m``). ``--answerable-only`` trains only on questions whose passages hold a
gold answer, as DPR does (a generative reader trained on the others learns to answer from its own weights).
``--mss-questions N`` adds N label-free questions made from the evidence to the training split (a sentence's
salient name or date as a what/when question, answered in its passage: REALM's and Sachan et al.'s masked
salient spans, :func:`mwb.retrieval.salient_spans.mss_questions`); dev keeps real questions.
``--questions mss`` reads no question file: the questions are ``mwb finetune e2e-qa --questions mss``'s
*training* questions on the same ``--evidence`` (:mod:`mwb.retrieval.mss_question_file`; e2e-qa's held-out
quarter is never read), split as above: the reader training before joint training that an ``e2e-qa`` run
starts from (``--reader``) and is then evaluated on questions this reader never saw.
Metrics: SQuAD exact match and F1 against any gold answer, and how many questions had a gold answer in their
passages (the reader's ceiling for extractive answers).
"""
from __future__ import annotations

import sys
from typing import Optional

from mwb.core.config import ConfigError
from mwb.evaluation.metrics import squad_exact_match, squad_f1
from mwb.evaluation.predictions import item_id
from mwb.retrieval.bm25 import BM25Retriever
from mwb.retrieval.readers import training as reader_training
from mwb.retrieval.readers.base import KINDS, ReaderConfig, holds_answer
from mwb.retrieval.readers.loading import load_reader
from mwb.retrieval.salient_spans import mss_questions
from mwb.retrieval.mss_question_file import MSS, evidence_questions
from mwb.retrieval.e2e.train import answerable, split_questions
from mwb.retrieval.qa_system import RandomRetriever
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, BUNDLED_REAL_QUESTIONS, read_evidence, read_questions

from ..api.base import MetricSpec, Option, Task
from ..api.finetuning_spec import Finetuning, Start, Training
from ..api.records import unique
from ..api.registry import register
from ..api.objectives import CUSTOM

SPLITS = ("train", "dev", "all")
READER_START = {"extractive": Start("bert", named="minilm-l6"), "fid": Start("t5"),
                "causal": Start("gpt", named="smollm2-135m")}
PASSAGES = ("bm25", "random")


@register("qa-reader")
class QAReader(Task):
    description = "open-domain QA reader (extractive BERT, T5 FiD or causal LM) on BM25 passages: SQuAD EM/F1"
    objective = CUSTOM
    metric = "exact_match"
    default_data = BUNDLED_REAL_QUESTIONS
    # the readers' own featurising, spec and dev predictions; one epoch without --epochs: three took 648 s on 2
    # quiet cores (over the 10 minutes a no-argument default may take), and dev F1 was best after the first
    finetuning = Finetuning(training=Training(reader_training.featurize, reader_training.make_spec,
                                              reader_training.dev_predictions), epochs=1,
                            larger="A larger run: questions whose answers the evidence holds (--data, --evidence; "
                                   "the bundled passages hold the answer for about 11% of the bundled questions), "
                                   "--answerable-only, more --epochs and a larger reader (--checkpoint).")
    options = {
        "split": Option(str, None, "train, dev (every fifth question) or all (default: dev)", choices=SPLITS),
        "batch_size": Option(int, 8, low=1, help="Questions per forward pass (evaluation)."),
        "reader": Option(str, "extractive", choices=KINDS,
                         help="extractive (BERT spans), fid (T5 FiD) or causal (GPT/Llama)"),
        "evidence": Option(str, None, "evidence TSV: id<TAB>text<TAB>title (default: bundled Wikipedia sample)"),
        "top_k": Option(int, 5, low=1, help="passages per question"),
        "passages": Option(str, "bm25", choices=PASSAGES, help="bm25 (retrieved) or random (a control)"),
        "reader_length": Option(int, 192, low=1, help="tokens per question + passage input"),
        "answer_length": Option(int, 16, low=1, help="FiD/causal: answer tokens; extractive: longest span (tokens)"),
        "max_questions": Option(int, 500, low=0, help="questions kept, evenly spread over the file (0: all)"),
        "answerable_only": Option(bool, False, "train only on questions whose passages hold a gold answer "
                                               "(DPR's reader training; dev and evaluation keep every question)"),
        "questions": Option(str, None, "mss: e2e-qa --questions mss's training questions made from --evidence "
                                       "(its held-out quarter never read; no --data)", choices=(MSS,)),
        "mss_questions": Option(int, 0, low=0, help="add N questions made from the evidence's salient spans to the "
                                        "training split (answers in their passages; no labels)"),
    }

    def __init__(self, **opts) -> None:
        super().__init__(**opts)  # Option.check refuses a value outside its choices or bounds
        self.reader = self.opts["reader"]
        self.reader_config = ReaderConfig(seq_length=self.opts["reader_length"],
                                          max_answer_tokens=self.opts["answer_length"],
                                          answer_length=self.opts["answer_length"])
        self._evidence = self._bm25 = self._mss_train = None

    @classmethod
    def trainable(cls) -> bool:
        return True

    def arches(self) -> tuple[str, ...]:
        """The architecture of ``--reader``: BERT (extractive), T5 (fid) or GPT (causal)."""
        return reader_training.arches(self)

    def start(self) -> Start:
        """Fine-tuning's start without --checkpoint: MiniLM (all-MiniLM-L6-v2) for the extractive reader and
        SmolLM2-135M-Instruct for the causal one, when installed; for FiD (and otherwise), the newest ``mwb
        pretrain`` run of the reader's architecture, or a tiny one trained first."""
        return READER_START[self.reader]

    # --- data ------------------------------------------------------------------------------------------
    def evidence(self):
        if self._evidence is None:
            self._evidence = read_evidence(self.opts["evidence"] or BUNDLED_EVIDENCE)
        return self._evidence

    def passages_for(self, questions: list[str]) -> list[list[int]]:
        ev, k = self.evidence(), min(self.opts["top_k"], len(self.evidence()))
        if self.opts["passages"] == "random":
            return RandomRetriever(len(ev)).search(questions, k)[1].tolist()
        if self._bm25 is None:
            self._bm25 = BM25Retriever(ev)
        return self._bm25.search(questions, k)[1].tolist()

    def data_path(self, path: Optional[str]) -> str:
        """With ``--questions mss`` the evidence is the data (a ``--data`` file would be ignored, so it is refused)."""
        if self.opts["questions"] == MSS:
            if path:
                raise ConfigError(f"--questions {MSS} makes its questions from --evidence: drop --data {path}")
            return self.opts["evidence"] or BUNDLED_EVIDENCE
        return super().data_path(path)

    def read(self, path: str, split: str) -> list[dict]:
        n = self.opts["max_questions"]
        if self.opts["questions"] == MSS:  # e2e-qa's own split: its answerable questions, every 4th held out
            if self._mss_train is None:  # train and dev both read it: made once
                self._mss_train = split_questions(answerable(evidence_questions(path), self.evidence()))[0]
            qs = self._mss_train
        else:
            qs = read_questions(path)
        qs = [{**q, "index": i} for i, q in enumerate(qs)]  # the line in the file: the question's id
        if n and len(qs) > n:  # an even spread keeps every dataset of a file grouped by dataset
            qs = [qs[i * len(qs) // n] for i in range(n)]
        if split != "all":
            qs = [q for i, q in enumerate(qs) if (i % 5 == 4) == (split == "dev")]
        ev = self.evidence()
        if split == "train" and self.opts["mss_questions"]:
            made = mss_questions(ev.texts, self.opts["mss_questions"])
            if len(made) < self.opts["mss_questions"]:
                print(f"mwb: --mss-questions {self.opts['mss_questions']}: the evidence gives {len(made)} (one per "
                      f"passage with a usable name or date)", file=sys.stderr)
            qs = qs + made
        rows = self.passages_for([q["question"] for q in qs])
        out = [{"question": q["question"], "answers": list(q["answers"]),
                "id": str(q["id"]) if q.get("id") not in (None, "") else
                (f"q{q['index']}" if "index" in q else f"mss{item_id(q['question'], list(q['answers']))}"),
                "docs": [{"id": ev.ids[r], "title": ev.titles[r], "text": ev.texts[r]} for r in rs]}
               for q, rs in zip(qs, rows)]
        if split == "train" and self.opts["answerable_only"]:
            out = [e for e in out if holds_answer(e["docs"], e["answers"])]
        return out

    # --- metrics ---------------------------------------------------------------------------------------
    metric_specs = (*(MetricSpec(m, "mean", empty=0.0) for m in ("exact_match", "f1", "answer_in_passages")),
                    MetricSpec("count", "count"))

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per question: ``exact_match``, ``f1`` and ``answer_in_passages`` on the 0–100 scale the corpus
        numbers use; id: the question's own ``id``, else ``q<line index>`` in the questions file."""
        ids = unique([e["id"] for e in examples])
        return [{"id": i, "prediction": p, "gold": list(e["answers"]),
                 "exact_match": 100.0 * squad_exact_match(p, e["answers"]), "f1": 100.0 * squad_f1(p, e["answers"]),
                 "answer_in_passages": 100.0 * holds_answer(e["docs"], e["answers"])}
                for i, p, e in zip(ids, preds, examples)]

    # --- harness ---------------------------------------------------------------------------------------
    def load_model(self, checkpoint, tokenizer=None, device=None):
        reader = load_reader(checkpoint, device or "cpu", self.reader_config, tokenizer)
        self.reader = reader.kind  # the checkpoint decides; --reader is for fine-tuning
        self.decide(reader=reader.kind)
        return reader.run_cfg, reader

    def build(self, examples, reader):
        self.examples = examples
        return examples

    def run(self, reader, items):
        items = list(items)
        bs = self.opts["batch_size"]
        return [p for i in range(0, len(items), bs) for p in
                reader.predict([e["question"] for e in items[i:i + bs]], [e["docs"] for e in items[i:i + bs]])]

    def aggregate(self, results):
        return self.metrics(results, self.examples)
