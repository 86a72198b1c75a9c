"""Stage 3, roundtrip filtering: keep a synthetic pair only if a QA model recovers its answer.

A QA model reads (context, question) and answers; the pair is kept when the SQuAD EM or F1 between that
answer and the intended one reaches ``threshold`` (Puri et al. keep exact matches: ``metric="em"``,
``threshold=1``). The QA model is any function from examples to answer texts, so the rule is tested with a
stub; :func:`squad_answerer` makes one from a fine-tuned ``squad`` checkpoint (:mod:`mwb.tasks.squad.task`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mwb.core.config import ConfigError
from mwb.evaluation.metrics import squad_exact_match, squad_f1

from ..api import encoder_objective
from ..squad.task import Squad

METRICS = {"em": squad_exact_match, "f1": squad_f1}


@dataclass(frozen=True)
class FilterRule:
    metric: str = "f1"
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"--filter-metric must be em or f1, not '{self.metric}'")


def roundtrip_filter(examples: Sequence[dict], answer: Callable[[list[dict]], list[str]],
                     rule: FilterRule = FilterRule()) -> tuple[list[dict], list[dict]]:
    """``(kept, dropped)``: each example (``question``, ``context``, ``answers``) with ``recovered`` (the QA
    model's answer) and ``roundtrip_score`` added."""
    recovered = answer(list(examples))
    if len(recovered) != len(examples):
        raise ValueError(f"the QA model answered {len(recovered)} of {len(examples)} questions")
    score = METRICS[rule.metric]
    kept, dropped = [], []
    for e, r in zip(examples, recovered):
        s = float(score(r, e["answers"]))
        (kept if s >= rule.threshold else dropped).append({**e, "recovered": r, "roundtrip_score": s})
    return kept, dropped


def squad_answerer(checkpoint: str, seq_length: int = 192, batch_size: int = 16) -> Callable[[list[dict]], list[str]]:
    """Answers from a fine-tuned ``squad`` checkpoint (v1.1: always a span), for examples in
    :func:`mwb.tasks.squad.data.read_squad`'s form."""
    task = Squad(seq_length=seq_length, batch_size=batch_size)
    _, runner = encoder_objective.load_model(task, checkpoint)

    def answer(examples: list[dict]) -> list[str]:
        features = task.features(examples, runner.tokenizer, runner.seq_length)
        outputs = encoder_objective.run(task, runner, features)
        return [p["text"] for p in task.predictions(outputs, features, examples)]
    return answer
