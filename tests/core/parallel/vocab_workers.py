"""Per-rank functions of the padded-vocabulary tests (importable by spawned ranks).

A model is loaded from a Hugging Face GPT-2 directory through the loading path fine-tuning uses
(:func:`~mwb.core.compose.full_state`, then every chunk filled from the global tensors), then its padded
vocabulary rows — the rows past the true vocabulary size, which loading leaves at zero — are filled with
large values, as a Megatron checkpoint's or a trained model's would be. If a padded row entered the
softmax anywhere (loss, gradient, logits), the losses of different TP degrees (different padding) would
differ from one process and from each other.
"""
from __future__ import annotations

import copy

import torch

from mwb.core.checkpoint.reader import copy_full_tensors
from mwb.core.compose import full_state
from mwb.core.config import RunConfig, update
from mwb.core.models.init import is_output_head
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import Trainer
from tests.core.parallel.lora_workers import adapter_grads
from tests.helpers.workers import report_run

PADDED_VALUE = 30.0  # large enough that a padded row taking part would move the loss by whole units


def fill_padded_rows(model, vocab: int, value: float = PADDED_VALUE) -> int:
    """Fill this rank's rows of the word embedding and output head past the true vocabulary ``vocab`` with
    ``value``; returns how many rows it filled (so a test can check the model was padded at all)."""
    filled = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not (name.endswith("word.weight") or is_output_head(name)):
                continue
            start = p.tp_rank * p.size(0) if getattr(p, "tp_dim", None) == 0 else 0
            first = max(vocab - start, 0)
            if first < p.size(0):
                p[first:] = value
                filled += p.size(0) - first
    return filled


class LoadedGPT(GPTSpec):
    """GPT whose chunks are filled from a loaded checkpoint and whose padded rows hold garbage."""

    def __init__(self, cfg: RunConfig, vocab: int, tensors: dict) -> None:
        super().__init__(cfg, vocab)
        self.tensors, self.filled = tensors, 0

    def build_chunk(self, state, stage, device, dtype):
        chunk = super().build_chunk(state, stage, device, dtype)
        copy_full_tensors([chunk], self.tensors.__getitem__, self.vocab_size, self.cfg.model.tie_embeddings)
        self.filled += fill_padded_rows(chunk, self.vocab_size)
        return chunk


def adapter_report(trainer) -> dict:
    """Losses of every step and the gathered adapter gradients of step 2 (step 1's A-gradients are zero)."""
    box, calls = {}, {"n": 0}
    orig = trainer.optimizer.apply

    def apply(lr, loss_scale=1.0, grad_scale=1.0):
        calls["n"] += 1
        if calls["n"] == 2:
            box["grads"] = {k: v * (grad_scale / loss_scale) for k, v in adapter_grads(trainer).items()}
        return orig(lr, loss_scale, grad_scale)
    trainer.optimizer.apply = apply
    return {"losses": [h.loss for h in trainer.run()], "grads": box.get("grads")}


def loaded_tree(cfg: RunConfig, tp: int, lora: int, steps: int = 2) -> dict:
    model = {k: v for k, v in vars(cfg.model).items() if not k.startswith("_")}
    model.update(dropout=0.0, attention_dropout=0.0)
    return {"model": model, "parallel": {"tp": tp},
            "train": {"steps": steps, "micro_batch_size": 1, "global_batch_size": 4, "seq_length": 12, "seed": 5},
            "optim": {"lr": 1e-2, "warmup_steps": 0}, "lora": {"rank": lora, "alpha": 2.0 * lora if lora else None}}


def loaded_run(rank: int, world: int, hf_dir: str, layouts: list) -> list:
    """For each ``(tp, lora)`` of ``layouts`` in turn (one spawned group reused): losses of every step,
    gathered step-1 gradients and how many padded rows this rank holds."""
    cfg, vocab, tensors, _ = full_state(hf_dir)
    out = []
    for tp, lora in layouts:
        run_cfg = update(RunConfig(), copy.deepcopy(loaded_tree(cfg, tp, lora)))
        spec = LoadedGPT(run_cfg, vocab, tensors)
        data = SyntheticTokens(vocab, run_cfg.train.seq_length, seed=7)
        trainer = Trainer(run_cfg, spec, data, world_size=world)
        res = adapter_report(trainer) if lora else report_run(trainer)
        res.update(padded_rows=spec.filled, padded_vocab=trainer.chunks[-1].padded_vocab_size, vocab=vocab)
        out.append(res)
    return out
