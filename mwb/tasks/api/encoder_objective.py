"""Encoder objectives (classification, multiple choice, token classification, span): a BERT + task head.

What fine-tuning and the harness need for these objectives, in one place: featurising examples through the
task's ``inputs``, the training spec (the encoder's pretrained weights + a fresh head, on the shared
trainer), predictions (argmax; span: start/end), and loading a fine-tuned checkpoint for ``mwb eval``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

from mwb.core.config import RunConfig
from mwb.core.errors import CheckpointError
from mwb.core.training.model_spec import ModelSpec

from .encoder_model import build_task_model, load_weights, predict


def featurize(task, examples: list[dict], tokenizer, seq_length: int) -> list[dict]:
    return task.features(examples, tokenizer, seq_length)


class EncoderSpec(ModelSpec):
    """Batch → (loss sum, count) for an encoder + head; pretrained encoder weights go in at build time."""
    arch = "bert"

    def __init__(self, cfg: RunConfig, vocab_size: int, task, tensors: Optional[dict], source: str) -> None:
        super().__init__(cfg, vocab_size)
        self.task, self.tensors, self.source = task, tensors, source
        self.missing: list[str] = []

    def build_chunk(self, state, stage, device, dtype):
        model = build_task_model(self.cfg.model, state, self.vocab_size, self.task.objective.name, self.task.num_labels,
                                 self.cfg.train.seed, device, dtype)
        if self.tensors is not None:
            self.missing = load_weights(model, self.tensors, self.vocab_size, self.source, encoder_only=True)
        return model

    def forward(self, model, batch, hidden=None):
        return model(batch["tokens"], batch.get("types"), batch.get("padding_mask"), labels=batch["label"])

    def tokens_in(self, batch):
        return batch["tokens"].numel()

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        return float(micro_batch)


def make_spec(task, cfg: RunConfig, vocab: int, tensors: dict, source: str) -> EncoderSpec:
    return EncoderSpec(cfg, vocab, task, tensors, source)


def report_missing(spec: EncoderSpec, say) -> None:
    if spec.missing:
        say(f"mwb: not in the pretrained checkpoint, trained from scratch: {', '.join(spec.missing)}",
            file=sys.stderr)


def dev_predictions(task, trainer, features: list[dict], examples: list[dict]) -> list:
    """Per-example predictions of the model being trained (every TP rank calls this; pipeline stages are
    refused at build)."""
    outputs = predict(trainer.chunks[0], features, trainer.cfg.train.micro_batch_size, trainer.device, task.decode)
    return task.predictions(outputs, features, examples)


# ------------------------------------------------------------------------------------------- harness


@dataclass
class EncoderRunner:
    model: Any
    tokenizer: Any
    seq_length: int
    batch_size: int


def load_model(task, checkpoint: str, tokenizer: Optional[str] = None, device=None):
    """A fine-tuned checkpoint (encoder + this task's head) as a single-process model."""
    from mwb.core.compose import full_state
    from mwb.core.parallel.state import single_process_state
    from mwb.core.tokenizers import load_tokenizer

    cfg, vocab, tensors, tok_path = full_state(checkpoint)
    model = build_task_model(cfg.model, single_process_state(), vocab, task.objective.name, task.num_labels,
                             cfg.train.seed, device or "cpu")
    missing = load_weights(model, tensors, vocab, checkpoint, encoder_only=False)
    if missing:
        raise CheckpointError(f"{checkpoint} is not a fine-tuned '{task.name}' checkpoint: it lacks "
                              f"{', '.join(missing[:3])}")
    tok = load_tokenizer(tokenizer or tok_path)
    seq = task.option("seq_length") or cfg.train.seq_length
    return cfg, EncoderRunner(model.eval(), tok, seq, task.opts.get("batch_size") or 8)


def build(task, examples: list[dict], runner: EncoderRunner) -> list[dict]:
    return featurize(task, examples, runner.tokenizer, runner.seq_length)


def run(task, runner: EncoderRunner, items) -> list:
    return predict(runner.model, list(items), runner.batch_size, next(runner.model.parameters()).device,
                   task.decode)
