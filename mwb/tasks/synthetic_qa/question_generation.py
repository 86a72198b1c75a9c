"""``mwb finetune question-generation``: a GPT learns (passage, answer) → question from SQuAD-format data.

The generator of Puri et al.'s second stage. Data: SQuAD 1.1/2.0 JSON (``--data FILE`` or a directory with
``train-v1.1.json`` / ``dev-v1.1.json``); every answerable question is one example. Inputs: the prompt of
:func:`.questions.qg_prompt` with no demonstrations (the passage, or the answer's sentence with
``--context sentence``), target: the question. Objective: generative (the prompt masked out of the loss).
Metrics: EM/F1 of greedy questions against the reference ones. The run is then the ``--generator`` of
``mwb qa synthesize`` with ``--qg-shots 0``.
"""
from __future__ import annotations

from ..api.base import Option, Task
from ..api.formats.checks import nonempty
from ..api.registry import register
from ..api.objectives import GENERATIVE
from ..squad.data import read_squad, squad_file
from .answers import sentence_of
from .questions import qg_prompt


@register("question-generation", "qg")
class QuestionGeneration(Task):
    description = "question generation from (passage, answer) on SQuAD JSON: the synthetic-QA generator"
    objective = GENERATIVE
    options = {
        **Task.options,
        "context": Option(str, "passage", choices=("passage", "sentence"),
                          help="What the question is conditioned on: passage or sentence."),
    }

    def read(self, path: str, split: str) -> list[dict]:
        out = []
        for e in read_squad(squad_file(path, "1.1", split)):
            if not e["answers"] or e["span"] is None:
                continue
            answer = e["answers"][0]
            start = e["context"].find(answer)
            context = e["context"]
            if self.opts["context"] == "sentence" and start >= 0:
                context = sentence_of(context, start, start + len(answer))
            out.append({"id": e["id"], "context": context, "answer": answer, "question": e["question"]})
        return nonempty(out, path, f"answerable questions in split '{split}'")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {"prompt": qg_prompt(example["context"], example["answer"], shots=0),
                "target": " " + example["question"]}
