"""The one task interface: data, inputs, objective, metrics. Fine-tuning and evaluation both use it.

A task file declares four things and nothing else:

``read(path, split)``        its data: examples (dicts) from the official on-disk format, any file
                             ``datasets`` loads, or the bundled sample (``default_data``)
``inputs(example, tok, n)``  how one example becomes model inputs (depends on the objective, below)
``objective``                what the model is trained / scored on, one of :data:`OBJECTIVES`

and, where its numbers are not its objective's defaults, ``records(preds, examples)`` — one record per item
for ``predictions.jsonl`` (id, prediction, gold, each per-item metric or its parts) — with ``metric_specs``,
each ``results.json`` metric's name and kind (:class:`~mwb.evaluation.metric_specs.MetricSpec`; a corpus
metric with no per-item parts declares its own function of the records). One function aggregates the
metrics from the records; task-level numbers that are not per item come from ``summary``. Records first:
a task never computes a metric apart from its records (defaults in :mod:`.records`).

Objectives and what ``inputs`` returns for them:

``classification``, ``regression``, ``multiple_choice``, ``token_classification``, ``span``
    a BERT encoder + task head (:mod:`.encoder_objective`): numpy ``tokens``/``types``/``padding_mask`` and ``label``
    (regression: a float scored by squared error; multiple choice: ``[choices, seq]``; token labels ``-100``
    where unscored; span: ``[start, end]``). Predictions are argmax indices (regression: the score; span:
    ``(start, end)``, or what the task's ``predictions`` hook makes of the start/end logits).
``generative``
    a GPT (the prompt is masked out of the loss) or a T5 (encoder input → decoder target)
    (:mod:`.generative_objective`): ``{"prompt": str, "target": str}``. Predictions are greedy generations (text).
``custom``
    the task implements the harness steps itself (``load_model``/``load``/``build``/``run``/``aggregate``),
    as LAMBADA, WikiText and open-domain QA do.

The harness (:mod:`.evaluate`, ``mwb eval``) and the fine-tuning runner (:mod:`.finetune`, ``mwb finetune``)
do everything else: checkpoints, parallel layouts, data-parallel sharding of evaluation, ``results.json`` and
``predictions.jsonl`` beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Optional, Sequence

import numpy as np

from mwb.core.config import ConfigError
from mwb.core.data.spans import pair_inputs  # noqa: F401  (task files build sentence pairs with it)
from mwb.evaluation.metric_specs import MetricSpec, aggregate_metrics

from .objectives import (CLASSIFICATION, CUSTOM, ENCODER_OBJECTIVES, GENERATIVE, MULTIPLE_CHOICE,  # noqa: F401
                         OBJECTIVES, REGRESSION, SPAN, TOKEN_CLASSIFICATION, GenerationOptions, Objective)
from .records import default_records
from .finetuning_spec import Finetuning, Start, Training


@dataclass(frozen=True)
class Option:
    """A task option (``mwb eval TASK --name value``): ``type`` is bool (a flag), int, float or str.

    ``low``/``high`` bound a number (inclusive) and ``choices`` lists the allowed values: a value outside is a
    usage error (exit 2) when the command line is parsed, before any model or data is loaded."""
    type: type
    default: Any = None
    help: str = ""
    low: Optional[float] = None
    high: Optional[float] = None
    choices: Optional[tuple] = None

    def check(self, name: str, value: Any) -> Any:
        """``value`` when it is allowed (None, the unset default, always is), else a ConfigError naming ``--name``."""
        if value is None:
            return value
        flag = "--" + name.replace("_", "-")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"option {flag} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            bound = (f"in [{self.low}, {self.high}]" if self.low is not None and self.high is not None else
                     f">= {self.low}" if self.low is not None else f"<= {self.high}")
            raise ConfigError(f"option {flag} must be {bound}, got {value!r}")
        return value


class Task:
    name: ClassVar[str] = "task"          # set by @register
    description: ClassVar[str] = ""
    objective: ClassVar[Objective] = CUSTOM  # one of :data:`~.objectives.OBJECTIVES`
    default_data: ClassVar[Optional[str]] = None  # the bundled sample in the official layout
    num_labels: ClassVar[int] = 2         # classification / token classification heads
    metric: ClassVar[str] = "accuracy"    # picks the best fine-tuning checkpoint (higher is better)
    metric_specs: ClassVar[Optional[tuple[MetricSpec, ...]]] = None  # None: the objective's (declared_metrics)
    train_split: ClassVar[str] = "train"
    eval_split: ClassVar[str] = "dev"
    options: ClassVar[dict[str, Option]] = {
        "split": Option(str, None, "Which split to evaluate (default: the task's dev split; e.g. test)."),
        "batch_size": Option(int, 8, low=1, help="Examples per forward pass."),
        "seq_length": Option(int, None, low=1, help="Input length (default: the checkpoint's)."),
    }
    finetuning: ClassVar[Finetuning] = Finetuning()  # what `mwb finetune` reads (:mod:`.finetuning_spec`)

    def __init__(self, **opts: Any) -> None:
        unknown = set(opts) - set(self.options)
        if unknown:
            raise ConfigError(f"task '{self.name}' has no option(s) {', '.join(sorted(unknown))} "
                              f"(it takes: {', '.join(sorted(self.options)) or 'none'})")
        # Read-only: the options are what the user asked for; what a loaded checkpoint decides goes to
        # :meth:`decide`, so no step changes another step's options behind its back.
        self.opts: Mapping[str, Any] = MappingProxyType(
            {k: o.check(k, opts[k]) if k in opts else o.default for k, o in self.options.items()})
        self.decided: dict[str, Any] = {}
        self.examples: list[dict] = []

    # --- options and what the checkpoint decides -----------------------------------------------------
    def option(self, name: str) -> Any:
        """Option ``name`` as this evaluation uses it: what the loaded checkpoint decided (:meth:`decide`),
        else the user's value or the declared default."""
        return self.decided[name] if name in self.decided else self.opts[name]

    def decide(self, **values: Any) -> None:
        """Record settings the loaded checkpoint decides (the context length a model was trained at, the
        kind of a reader, how many stories a generator of its size writes). ``opts`` stays as the user gave
        it; :meth:`option` reads the decided value and results.json records both as ``task_options``
        (:meth:`recorded_options`)."""
        self.decided.update(values)

    def recorded_options(self) -> dict[str, Any]:
        """The options as this run used them, for results.json: the user's, with what the checkpoint decided."""
        return {**self.opts, **self.decided}

    @classmethod
    def trainable(cls) -> bool:
        return cls.objective.trainable

    # --- what the runners ask a task: declared here with their defaults (no runner probes a task) ----------
    def training(self) -> Training:
        """What ``mwb finetune`` trains this task with (:class:`~.finetuning_spec.Training`: ``featurize``,
        ``make_spec``, ``dev_predictions``): the declared ``finetuning.training`` (the open-domain QA reader's),
        else the objective's."""
        return self.objective.training(self)

    def arches(self) -> tuple[str, ...]:
        """The model architectures this task fine-tunes; the starting checkpoint must hold one. Default: the
        objective's (a BERT for encoder heads; a GPT or a T5 for generative targets)."""
        return self.objective.arches()

    def context_length(self, runner) -> Optional[int]:
        """The longest input the loaded ``runner`` takes, from which the harness sets the default
        ``--seq-length`` (None: no limit of its own). Default: the objective's; a custom task whose runner is
        a language model declares that model's positions."""
        return self.objective.context_length(runner)

    def start(self) -> Start:
        """Where ``mwb finetune`` starts without ``--checkpoint`` (:class:`~.finetuning_spec.Start`): the declared
        ``finetuning.start``, else the objective's — ``minilm-l6`` when installed, else a tiny BERT, for encoder
        heads; a tiny GPT for generative targets."""
        return self.finetuning.start or self.objective.start()

    @classmethod
    def default_checkpoint(cls, say=print) -> Optional[str]:
        """What ``mwb eval`` evaluates without ``--checkpoint`` when the task names a model of its own (a named
        model it prompts; announced through ``say``). Default None: the common rule of
        :func:`~.setup.eval_checkpoint` (the newest fine-tuning run of a trainable task, else the newest GPT)."""
        return None

    def files(self, metrics: dict, records: list[dict], examples: list[dict]) -> dict[str, str]:
        """Files written beside ``results.json`` after an evaluation, name → text (the generations, a sweep's
        table): a function of the evaluation's metrics, records and examples. Default: none."""
        return {}

    # --- what a task file writes ------------------------------------------------------------------------
    def read(self, path: str, split: str) -> list[dict]:
        raise NotImplementedError(f"task '{self.name}' reads no data")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        raise NotImplementedError(f"task '{self.name}' has no inputs for objective '{self.objective}'")

    def gpt_sample(self, example: dict, tokenizer, seq_length: int) -> dict:
        """Generative objective, GPT: the training sample of ``example``, ``tokens`` and ``loss_mask`` of
        ``seq_length + 1`` (1 where a token is a target). Default: :meth:`inputs`' prompt → target with the prompt
        masked (:func:`~.generative_objective.gpt_sample`); a task whose loss covers more than one span (chat:
        every assistant turn) builds its own."""
        from .generative_objective import gpt_sample
        x = self.inputs(example, None, 0)  # the texts, as evaluation builds its prompts from them
        return gpt_sample(tokenizer.encode(x["prompt"]), tokenizer.encode(x.get("target", "")), seq_length,
                          tokenizer.eod)

    def features(self, examples: list[dict], tokenizer, seq_length: int) -> list[dict]:
        """Encoder objectives: the model inputs of ``examples``, one per example (:meth:`inputs`). A task
        whose example needs several inputs (SQuAD's doc-stride windows) overrides this and
        :meth:`predictions`; numpy metadata in a feature (e.g. its example's index) travels with it."""
        return [self.inputs(e, tokenizer, seq_length) for e in examples]

    def predictions(self, outputs: list, features: list[dict], examples: list[dict]) -> list:
        """Encoder objectives: per-example predictions from the per-feature outputs of :meth:`decode`. Default:
        one feature per example, so the outputs themselves; SQuAD pools its doc-stride windows here."""
        return outputs

    def declared_metrics(self) -> tuple[MetricSpec, ...]:
        """The ``results.json`` metrics and how each aggregates from :meth:`records`
        (:class:`~mwb.evaluation.metric_specs.MetricSpec`): the task's ``metric_specs``, else its objective's."""
        return self.metric_specs if self.metric_specs is not None else self.objective.metric_specs

    def summary(self, preds: list, examples: list[dict], records: list[dict]) -> dict:
        """Task-level numbers that are not per item (the data's count of entities, a fixed prompt's size),
        each declared in :meth:`declared_metrics` with kind ``summary``; computed here once. Default: none."""
        return {}

    def outcome(self, preds: list, examples: list[dict]) -> tuple[list[dict], dict]:
        """``(records, summary)`` of per-example predictions. A task whose records and summary share one
        costly computation (dialogue's actor ranker) overrides this instead of the two."""
        records = self.records(preds, examples)
        return records, self.summary(preds, examples, records)

    def evaluation(self, preds: list, examples: list[dict]) -> tuple[dict, list[dict]]:
        """``(metrics, records)``: the records and the declared metrics, aggregated from them (and the
        summary's numbers) by the one function (:func:`~mwb.evaluation.metric_specs.aggregate_metrics`)."""
        records, extra = self.outcome(preds, examples)
        return aggregate_metrics(records, self.declared_metrics(), extra), records

    def metrics(self, preds: list, examples: list[dict]) -> dict[str, float]:
        """The task's numbers (:meth:`evaluation`'s metrics); tasks declare them, they do not override this."""
        return self.evaluation(preds, examples)[0]

    def generation(self) -> GenerationOptions:
        """How a generative task decodes when scored: :class:`~.objectives.GenerationOptions`'s declared
        defaults, overridden by the task's options of the same names."""
        return GenerationOptions.of(self.recorded_options())

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """One record per evaluated item for ``OUT/predictions.jsonl`` (:mod:`mwb.evaluation.predictions`):
        a stable string ``"id"`` (the dataset's own id, else a hash of the input), ``"prediction"``, ``"gold"``
        and each per-item metric under its ``results.json`` name — a number for a mean, the parts
        (``tp``/``fp``/``fn``, ``nll``/``tokens``) for a corpus metric — from which :meth:`declared_metrics`
        aggregate. ``preds`` are per-example predictions (a custom task: its ``run`` results in item order).
        Default: the objective's (:func:`.records.default_records`); a task that overrides it declares
        ``metric_specs`` too."""
        return default_records(self, preds, examples)

    def prepare(self, path: str) -> None:
        """Called with the data path before the model is built, by fine-tuning and ``mwb eval`` alike: a task
        whose label set comes from the data (NER tags) sets ``num_labels`` here. Default: nothing."""

    def decode(self, logits: np.ndarray, feature: dict):
        """One encoder feature's prediction from its logits (``[labels]``, ``[choices]``, ``[seq, labels]`` or
        span ``[seq, 2]``): argmax (span: start and end). Tasks that map predictions back to words or text
        (NER first sub-tokens, span n-best lists) override it; ``feature`` is what :meth:`inputs` returned.
        Regression: the score."""
        return self.objective.decode(logits, feature)

    # --- harness steps (evaluation); objectives implement them, custom tasks override ----------------------
    def data_path(self, path: Optional[str]) -> str:
        if path:
            return path
        if self.default_data:
            return self.default_data
        raise ConfigError(f"task '{self.name}' needs --data PATH (it has no bundled sample)")

    def load(self, path: Optional[str]) -> list[dict]:
        """The evaluation examples: the split named by ``--split`` (when the task has that option) or ``eval_split``."""
        return self.read(self.data_path(path), self.opts.get("split") or self.eval_split)

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        """``(run config, runner)``; the runner is what :meth:`build`/:meth:`run` receive."""
        return self.objective.load_model(self, checkpoint, tokenizer, device)

    def build(self, examples: list[dict], runner) -> list:
        self.examples = examples
        self.items = self.objective.build(self, examples, runner)
        return self.items

    def run(self, runner, items: Sequence) -> list:
        return self.objective.run(self, runner, items)

    def aggregate(self, results: list) -> dict[str, float]:
        if self.objective.pools:
            results = self.predictions(results, self.items, self.examples)
        return self.metrics(results, self.examples)

    def item_records(self, results: list) -> list[dict]:
        """Harness step beside :meth:`aggregate`: the :meth:`records` of ``run``'s results in item order
        (encoder objectives pool them into per-example predictions first, as :meth:`aggregate` does)."""
        if self.objective.pools:
            results = self.predictions(results, self.items, self.examples)
        return self.objective.finish_records(self.records(results, self.examples))

    def score(self, results: list) -> tuple[dict, list[dict]]:
        """The harness's last step: ``(metrics, records)`` of ``run``'s results, the records computed once
        where the objective scores through :meth:`evaluation` (a custom task: its :meth:`aggregate` and
        :meth:`item_records`)."""
        return self.objective.score(self, results)

    def describe(self) -> dict:
        """What results.json records about the task besides its metrics."""
        return {"name": self.name, "objective": self.objective.name, "options": self.recorded_options()}


# --------------------------------------------------------------------------------------------- options


def parse_task_args(task_cls: type, args: Sequence[str]) -> dict:
    """``['--strict', '--top-k', '5']`` → ``{'strict': True, 'top_k': 5}`` for the options ``task_cls`` declares.

    Flags are written with dashes on the command line and underscores in ``Task.options``; ``--x=v`` works too.
    """
    out: dict[str, Any] = {}
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' for task '{task_cls.name}'")
        key, eq, value = arg[2:].partition("=")
        name = key.replace("-", "_")
        negate = name.startswith("no_") and name[3:] in task_cls.options
        opt = task_cls.options.get(name[3:] if negate else name)
        if opt is None:
            known = ", ".join("--" + k.replace("_", "-") for k in sorted(task_cls.options)) or "none"
            raise ConfigError(f"task '{task_cls.name}' has no option --{key} (it takes: {known})")
        if opt.type is bool:
            out[name[3:] if negate else name] = (not negate) if not eq else value.lower() in ("1", "true", "yes")
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise ConfigError(f"option --{key} of task '{task_cls.name}' needs a value")
            value = args[i + 1]
            i += 1
        try:
            out[name] = opt.type(value)
        except ValueError:
            raise ConfigError(f"option --{key} expects {opt.type.__name__}, got {value!r}") from None
        opt.check(name, out[name])
        i += 1
    return out


# ------------------------------------------------------------------------------------ input builders


def single_inputs(ids: list[int], tokenizer, seq_length: int) -> dict:
    """``[CLS] ids [SEP]`` (cut to fit) with token types 0 and padding: one-sentence classification."""
    tokenizer.require("cls", "sep", "pad", purpose="sentence classification inputs")
    ids = [tokenizer.cls] + ids[: seq_length - 2] + [tokenizer.sep]
    pad = seq_length - len(ids)
    return {"tokens": np.array(ids + [tokenizer.pad] * pad, dtype=np.int64),
            "types": np.zeros(seq_length, dtype=np.int64),
            "padding_mask": np.array([1] * len(ids) + [0] * pad, dtype=np.int64)}
