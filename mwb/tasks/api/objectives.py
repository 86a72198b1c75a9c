"""Objectives as declared objects: what a task is trained and scored on, and every step a runner asks of it.

Why objects and not a string: ``mwb finetune`` and ``mwb eval`` need, for each objective, the model
architectures it accepts, where fine-tuning starts, how examples become training samples, the training spec,
the dev metric and how it is computed each epoch, model loading for evaluation, the harness steps and the
default per-item records. :class:`Objective` declares each of these with its default (as torchtitan's
``TrainSpec`` declares a model family), and each objective overrides what differs; a runner calls the
methods and never compares an objective's name. ``Task.objective`` holds one of the instances below.

The objective implementations themselves live in :mod:`.encoder_objective` and :mod:`.generative_objective`
(imported on use: each pulls in its own model code), each objective's fine-tuning functions declared as a
:class:`~.finetuning_spec.Training`; the open-domain QA reader declares its own (``finetuning.training``),
which every objective's :meth:`Objective.training` honours.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from mwb.evaluation.metric_specs import MetricSpec

from .finetuning_spec import ENCODER_ARCHES, ENCODER_START, GENERATIVE_ARCHES, GENERATIVE_START, Start, Training


@dataclass(frozen=True)
class GenerationOptions:
    """How a generative task decodes when scored: declared once, with their defaults. A task that exposes one
    as a command-line option (``max_tokens``, ``num_beams``, ``first_line``, ``length_penalty``,
    ``no_repeat_ngram``) overrides the default with the option's value; an unset option keeps the default."""
    max_tokens: int = 32
    num_beams: int = 1
    first_line: bool = False
    length_penalty: float = 1.0
    no_repeat_ngram: int = 0
    batch_size: int = 16

    @classmethod
    def of(cls, opts) -> "GenerationOptions":
        """The options of a task whose option values are ``opts`` (a falsy or missing value: the default)."""
        d = cls()
        return cls(max_tokens=opts.get("max_tokens") or d.max_tokens, num_beams=opts.get("num_beams") or d.num_beams,
                   first_line=bool(opts.get("first_line")),
                   length_penalty=opts.get("length_penalty", d.length_penalty),
                   no_repeat_ngram=opts.get("no_repeat_ngram") or d.no_repeat_ngram,
                   batch_size=opts.get("batch_size") or d.batch_size)


class Objective:
    """The declared interface of an objective. Defaults are the custom objective's: not trainable, and the
    task implements ``load_model``/``build``/``run``/``records`` itself."""
    name: str = "custom"
    trainable: bool = False
    packs: bool = False                  # --pack applies (GPT samples of generative fine-tuning)
    scored_after_training: bool = False  # fine-tuning scores the best checkpoint through the harness afterwards
    pools: bool = False                  # run's per-feature outputs go through task.predictions before metrics

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    def __repr__(self) -> str:
        return f"<objective {self.name}>"

    # --- fine-tuning ------------------------------------------------------------------------------------
    def arches(self) -> tuple[str, ...]:
        """The model architectures it fine-tunes."""
        return ENCODER_ARCHES

    def start(self) -> Start:
        """Where fine-tuning starts without ``--checkpoint``."""
        return ENCODER_START

    def training(self, task) -> Training:
        """The :class:`~.finetuning_spec.Training` that featurises, builds the spec and predicts the dev split:
        the task's own (``finetuning.training``, as the open-domain QA reader brings), else the objective's."""
        if task.finetuning.training is None:
            raise NotImplementedError(f"task '{task.name}' (objective '{self.name}') declares no training")
        return task.finetuning.training

    def featurize(self, task, train_ex: list, dev_ex: list, tok, seq_length: int, arch: str) -> tuple[list, list]:
        """The training and dev samples of the two splits."""
        mod = self.training(task)
        return mod.featurize(task, train_ex, tok, seq_length), mod.featurize(task, dev_ex, tok, seq_length)

    def make_spec(self, task, cfg, vocab: int, tensors: dict, source: str):
        return self.training(task).make_spec(task, cfg, vocab, tensors, source)

    def dev_metric(self, task) -> str:
        """The per-epoch dev metric that picks the best checkpoint."""
        return task.metric

    def epoch_metrics(self, task, trainer, dev_f: list, dev_ex: list, dev_steps: int) -> tuple[dict, Optional[list]]:
        """``(metrics, records)`` of one epoch's dev evaluation; the records (None: none) become the best
        epoch's ``predictions.jsonl``."""
        preds = self.training(task).dev_predictions(task, trainer, dev_f, dev_ex)
        return task.evaluation(preds, dev_ex)

    # --- evaluation harness -----------------------------------------------------------------------------
    def _harness(self, task):
        raise NotImplementedError(f"task '{task.name}' (objective '{self.name}') must implement "
                                  f"load_model/build/run itself")

    def load_model(self, task, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        return self._harness(task).load_model(task, checkpoint, tokenizer, device)

    def build(self, task, examples: list, runner) -> list:
        return self._harness(task).build(task, examples, runner)

    def run(self, task, runner, items) -> list:
        return self._harness(task).run(task, runner, items)

    def context_length(self, runner) -> Optional[int]:
        """The longest input ``runner`` takes (the default ``--seq-length`` comes from it), None when it has
        no such limit of its own. A custom task's runner is its own: the task declares its context
        (:meth:`~.base.Task.context_length`), the objective knows none."""
        return None

    def decode(self, logits, feature: dict):
        """One encoder feature's prediction from its logits: argmax."""
        return logits.argmax(-1).tolist()

    # --- metrics and records ------------------------------------------------------------------------------
    metric_specs: tuple = ()  # how its default records aggregate (a custom task declares its own)

    def score(self, task, results: list) -> tuple[dict, list[dict]]:
        """The harness's ``(metrics, records)``: a custom task's own :meth:`~.base.Task.aggregate` and
        :meth:`~.base.Task.item_records`."""
        return task.aggregate(results), task.item_records(results)

    def records(self, task, preds: list, examples: list) -> list[dict]:
        raise NotImplementedError(f"task '{task.name}' (objective '{self.name}') must implement records() itself")

    def finish_records(self, records: list[dict]) -> list[dict]:
        """What the objective adds to every record the task wrote (the harness's last step). Default: nothing."""
        return records

    def empty_outputs(self, records: list[dict]) -> Optional[int]:
        """The number of empty outputs among ``records`` (reported in results.json), None where the objective
        produces no text."""
        return None


class EncoderObjective(Objective):
    """A BERT encoder + task head (:mod:`.encoder_objective`)."""
    trainable = True
    pools = True

    def __init__(self, name: str) -> None:
        self.name = name

    def training(self, task) -> Training:
        from . import encoder_objective as e
        return task.finetuning.training or Training(e.featurize, e.make_spec, e.dev_predictions)

    def _harness(self, task):
        from . import encoder_objective
        return encoder_objective

    metric_specs = (MetricSpec("accuracy", "mean"), MetricSpec("count", "count"))

    def context_length(self, runner) -> Optional[int]:
        return None  # the checkpoint's training length, chosen by the encoder's load_model

    def score(self, task, results):
        """Pooled per-example predictions → :meth:`~.base.Task.evaluation`, its records computed once."""
        metrics, records = task.evaluation(task.predictions(results, task.items, task.examples), task.examples)
        return metrics, self.finish_records(records)

    def records(self, task, preds, examples):
        from .records import accuracy_records
        return accuracy_records(task, preds, examples)


class SpanObjective(EncoderObjective):
    def decode(self, logits, feature):
        return int(logits[:, 0].argmax()), int(logits[:, 1].argmax())


class RegressionObjective(EncoderObjective):
    def decode(self, logits, feature):
        return float(logits.reshape(-1)[0])


class GenerativeObjective(Objective):
    """Prompt → target with a GPT or a T5 (:mod:`.generative_objective`), scored by generations."""
    name = "generative"
    trainable = True
    packs = True
    scored_after_training = True

    def arches(self):
        return GENERATIVE_ARCHES

    def start(self):
        return GENERATIVE_START

    def training(self, task) -> Training:
        from . import generative_objective as g  # its featurize takes the architecture too (featurize below)
        return task.finetuning.training or Training(g.featurize, g.make_spec)

    def _harness(self, task):
        from . import generative_objective
        return generative_objective

    def context_length(self, runner) -> Optional[int]:
        return runner.max_length  # a LanguageModel's or a Seq2SeqModel's positions

    def featurize(self, task, train_ex, dev_ex, tok, seq_length, arch):
        from . import generative_objective as g
        dec = g.decoder_length(task, train_ex + dev_ex, tok, seq_length)
        return tuple(g.featurize(task, ex, tok, seq_length, arch, dec) for ex in (train_ex, dev_ex))

    def dev_metric(self, task):
        return "dev_loss"

    def epoch_metrics(self, task, trainer, dev_f, dev_ex, dev_steps):
        loss = trainer.evaluate(dev_steps)  # target-token loss over ⌊dev/G⌋ global batches (at least one)
        return {"dev_loss": loss, "dev_ppl": math.exp(min(loss, 50.0))}, None

    metric_specs = (MetricSpec("exact_match", "mean"), MetricSpec("f1", "mean"), MetricSpec("count", "count"))

    def score(self, task, results):
        metrics, records = task.evaluation(results, task.examples)
        return metrics, self.finish_records(records)

    def records(self, task, preds, examples):
        from .records import generation_records
        return generation_records(task, preds, examples)

    def finish_records(self, records):
        from .records import mark_empty
        return mark_empty(records)

    def empty_outputs(self, records):
        return sum(1 for r in records if r["empty"])


CLASSIFICATION = EncoderObjective("classification")
REGRESSION = RegressionObjective("regression")
MULTIPLE_CHOICE = EncoderObjective("multiple_choice")
TOKEN_CLASSIFICATION = EncoderObjective("token_classification")
SPAN = SpanObjective("span")
GENERATIVE = GenerativeObjective()
CUSTOM = Objective()

ENCODER_OBJECTIVES = (CLASSIFICATION, REGRESSION, MULTIPLE_CHOICE, TOKEN_CLASSIFICATION, SPAN)
OBJECTIVES = ENCODER_OBJECTIVES + (GENERATIVE, CUSTOM)


def as_plain(value: Any) -> Any:
    """``value`` with an objective as its name (for results.json)."""
    return value.name if isinstance(value, Objective) else value
