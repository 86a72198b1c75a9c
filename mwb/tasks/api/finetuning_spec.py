"""A task's fine-tuning declarations: one table the runners read, in the manner of torchtitan's ``TrainSpec``.

Why a table: ``mwb finetune TASK`` needs to know, for every task, which module trains it, which model
architectures it fine-tunes, where it starts when no ``--checkpoint`` is given and its default schedule. A
task states these once, as data (``finetuning = Finetuning(...)`` on its class); :class:`~.base.Task`
declares the methods that read them, each with its default, so no runner probes a task for attributes it
may or may not have. A task whose answer depends on its options (the open-domain QA reader's architecture
follows ``--reader``) overrides the method instead.

:class:`Start` is the rule "a named real model when it is installed, else the newest pretraining run of the
right kind, else a tiny one trained now" written as data; :func:`mwb.tasks.api.setup.starting_checkpoint`
applies it, in one place, for every fine-tuning command.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

ENCODER_ARCHES = ("bert",)
GENERATIVE_ARCHES = ("gpt", "t5")
PRETRAIN_ARCHES = ("bert", "gpt", "t5")  # what `mwb pretrain ARCH` trains


@dataclass(frozen=True)
class Start:
    """Where fine-tuning starts without ``--checkpoint``: ``named`` (a model of ``mwb models list``) when its
    package is installed; else the newest ``mwb pretrain ARCH`` run (on named data ``data``, e.g. ``pubmed``);
    else such a run of ``steps`` steps trained now, said out loud."""
    arch: str
    named: Optional[str] = None
    data: Optional[str] = None
    steps: int = 300

    def __post_init__(self) -> None:
        if self.arch not in PRETRAIN_ARCHES:
            raise ValueError(f"Start.arch must be one of {', '.join(PRETRAIN_ARCHES)}, got '{self.arch}'")

    def describe(self) -> str:
        """The rule in words, for a command's help."""
        run = (f"the newest `mwb pretrain {self.arch}" + (f" --data {self.data}" if self.data else "") +
               f"` run (a tiny one of {self.steps} steps is trained first if there is none)")
        return f"{self.named} when installed (mwb models list), else {run}" if self.named else run

    @property
    def run_prefix(self) -> str:
        """The run-directory prefix of the pretraining runs this start may reuse (``pretrain-bert-pubmed``)."""
        return f"pretrain-{self.arch}" + (f"-{self.data}" if self.data else "")


ENCODER_START = Start("bert", named="minilm-l6")  # a real encoder when the models extra is installed
GENERATIVE_START = Start("gpt")


@dataclass(frozen=True)
class RealScale:
    """What a no-argument run of a generative task trains when it starts from the real GPT
    (:data:`~.setup.REAL_GPT`, LoRA): SmolLM2-135M costs ~70x the tiny GPT per token, so the tiny GPT's
    default (all the bundled data, 3 epochs) would not finish in 10 minutes on 2 cores. ``config`` goes on top
    of the task's ``finetuning.config`` and the LoRA defaults, ``epochs`` replaces ``finetuning.epochs`` and
    ``task_opts`` are task option defaults (fewer examples); the user's flags, ``--epochs`` and task options
    still win. A task declares one to take the real start at all (:func:`~.setup.generative_start`)."""
    config: dict = field(default_factory=dict)
    epochs: Optional[int] = None
    task_opts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Training:
    """The functions ``mwb finetune`` calls to train a task on the shared trainer: a typed record, as
    torchtitan's ``TrainSpec`` is for a model family. An objective brings its own (encoder heads:
    :mod:`.encoder_objective`; generative targets: :mod:`.generative_objective`); a task with its own trainer
    declares one in ``Finetuning(training=...)`` (the open-domain QA reader's, :mod:`mwb.retrieval.readers.training`).

    ``featurize(task, examples, tokenizer, seq_length) -> list[dict]``  one split's training samples
    ``make_spec(task, cfg, vocab, tensors, source)``                    the model spec the trainer trains, its
                                                                        weights from the start checkpoint
    ``dev_predictions(task, trainer, features, examples) -> list``      one prediction per dev example, what
                                                                        ``task.evaluation`` scores each epoch;
                                                                        None where the objective scores its
                                                                        epochs otherwise (generative: dev loss)
    """
    featurize: Callable
    make_spec: Callable
    dev_predictions: Optional[Callable] = None


@dataclass(frozen=True)
class Finetuning:
    """What ``mwb finetune TASK`` reads from a task, beside its objective.

    ``training``  its :class:`Training` (featurise, build the training spec, predict the dev split); None:
                  the objective's own
    ``start``     where it starts without ``--checkpoint`` (:class:`Start`); None: the objective's
                  (:data:`ENCODER_START`, :data:`GENERATIVE_START`)
    ``epochs``    training epochs when ``--epochs`` is not given
    ``config``    config overrides on top of the fine-tuning defaults (``{"optim": {"lr": 1e-4}, "train":
                  {"seq_length": 128}}``); the user's flags and ``--set`` still win
    ``larger``    one sentence for the command's help: what a run larger than the default needs
    ``real``      the scale of a no-argument run from SmolLM2-135M with LoRA (:class:`RealScale`) when the
                  models extra is installed; None: the task keeps its ``start`` (a tiny GPT) whatever is installed
    """
    training: Optional[Training] = None
    start: Optional[Start] = None
    epochs: int = 3
    config: dict = field(default_factory=dict)
    larger: str = ("A larger run: the task's real data (--data), a larger pretrained model (--checkpoint), more "
                   "--epochs and a longer --seq-length; docs/downstream.md has the papers' recipes.")
    real: Optional[RealScale] = None
