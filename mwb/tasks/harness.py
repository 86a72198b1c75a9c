"""Fine-tuning tasks in the evaluation harness: ``mwb eval race --checkpoint BEST --data D``.

One adapter serves every :class:`~mwb.tasks.base.FinetuneTask`: it loads a fine-tuned checkpoint (encoder +
task head) as a single-process model, featurizes the task's evaluation split, predicts over the harness's
data-parallel shards and computes the task's own metrics, so the number matches what the fine-tuning run
reported for the same checkpoint and split.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mwb.evaluation.registry import register_task
from mwb.evaluation.task import Option, Task

from .base import discover, get_finetune_task
from .model import build_task_model, load_weights, predict


@dataclass
class TaskRunner:
    model: Any
    tokenizer: Any
    seq_length: int
    batch_size: int


class FinetuneEval(Task):
    kind = "finetune"
    finetune_name = ""
    options = {"split": Option(str, "dev", "Which split to evaluate (dev or test)."),
               "batch_size": Option(int, 8, "Examples per forward pass."),
               "seq_length": Option(int, None, "Input length (default: the checkpoint's).")}

    def __init__(self, **opts):
        super().__init__(**opts)
        self.ft = get_finetune_task(self.finetune_name)
        self.examples: list[dict] = []

    def load(self, path: Optional[str]) -> list[dict]:
        return self.ft.read(path or self.ft.default_data, self.opts["split"])

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        from mwb.core.checkpoint.consolidate import full_state
        from mwb.core.parallel.state import single_process_state
        from mwb.core.tokenizers import load_tokenizer

        # A fine-tuning run directory means its checkpoints/best: full_state resolves it (core.checkpoint).
        cfg, vocab, tensors, tok_path = full_state(checkpoint)
        model = build_task_model(cfg.model, single_process_state(), vocab, self.ft.head, self.ft.num_labels,
                                 cfg.train.seed, device or "cpu")
        missing = load_weights(model, tensors, vocab, checkpoint, encoder_only=False)
        if missing:
            from mwb.core.errors import CheckpointError
            raise CheckpointError(f"{checkpoint} is not a fine-tuned '{self.ft.name}' checkpoint: it lacks "
                                  f"{', '.join(missing[:3])}")
        tok = load_tokenizer(tokenizer or tok_path)
        seq = self.opts["seq_length"] or cfg.train.seq_length
        return cfg, TaskRunner(model.eval(), tok, seq, self.opts["batch_size"])

    def build(self, examples: list[dict], lm: TaskRunner) -> list[dict]:
        self.examples = examples
        return [self.ft.featurize(e, lm.tokenizer, lm.seq_length) for e in examples]

    def run(self, lm: TaskRunner, items) -> list:
        device = next(lm.model.parameters()).device
        return predict(lm.model, list(items), lm.batch_size, device)

    def aggregate(self, results: list) -> dict[str, float]:
        return self.ft.metrics(results, self.examples)


def _register_all() -> None:
    for name, cls in discover().items():
        adapter = type(f"{cls.__name__}Eval", (FinetuneEval,), {
            "finetune_name": name, "description": f"{name}: fine-tuned {cls.head.replace('_', ' ')} accuracy",
            "default_data": cls.default_data})
        register_task(name)(adapter)


_register_all()
