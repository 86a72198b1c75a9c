"""A base checkpoint and a LoRA run on it, in one process, as `mwb finetune --lora` builds them: the spec
copies the base's tensors into each chunk it builds and names the base in ``source``."""
from __future__ import annotations

import torch

from mwb.core.checkpoint.reader import copy_full_tensors
from mwb.core.checkpoint.writer import write_model_checkpoint
from mwb.core.compose import build_model, full_state
from mwb.core.config import RunConfig, update
from mwb.core.models.init import canonical_name
from mwb.core.parallel.state import single_process_state
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import Trainer

LLAMA = {"arch": "gpt", "num_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2,
         "normalization": "rmsnorm", "activation": "swiglu", "position_embedding": "rope", "bias": False,
         "tie_embeddings": False, "max_position_embeddings": 64, "dropout": 0.0}
GPT2 = {"arch": "gpt", "num_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "activation": "gelu_tanh",
        "max_position_embeddings": 64, "dropout": 0.0}


def write_base(path: str, model: dict, vocab: int, seed: int = 5) -> dict:
    """A base checkpoint: the seeded model with every tensor moved off its trivial init (norms, biases)."""
    cfg = update(RunConfig(), {"model": model})
    net = build_model(cfg.model, single_process_state(), vocab, seed)
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    with torch.no_grad():
        for name, p in net.named_parameters():
            canon = canonical_name(name, cfg.model.tie_embeddings)
            t = p.detach()[:vocab] if canon.endswith(("word.weight", "head.weight")) else p.detach()
            tensors.setdefault(canon, (t + 0.05 * torch.randn(t.shape, generator=g)).clone())
    write_model_checkpoint(path, cfg, vocab, tensors)
    return tensors


class PretrainedGPTSpec(GPTSpec):
    """GPTSpec whose chunks start from the tensors of ``source`` (the fine-tuning runner's pattern)."""

    def __init__(self, cfg, vocab_size, source):
        super().__init__(cfg, vocab_size)
        self.source = source
        self.missing: list = []
        self.tensors = full_state(source)[2]

    def build_chunk(self, state, stage, device, dtype):
        chunk = super().build_chunk(state, stage, device, dtype)
        copy_full_tensors([chunk], self.tensors.__getitem__, self.vocab_size, self.cfg.model.tie_embeddings)
        return chunk


def lora_trainer(base: str, model: dict, vocab: int, steps: int = 3, rank: int = 8, world: int = 1,
                 **sections) -> Trainer:
    tree = {"model": model, "train": {"steps": steps, "micro_batch_size": 2, "global_batch_size": 4,
                                      "seq_length": 16, "seed": 2},
            "optim": {"lr": 2e-2, "warmup_steps": 0, "weight_decay": 0.0}, "lora": {"rank": rank, "alpha": 16.0}}
    for k, v in sections.items():
        tree.setdefault(k, {}).update(v)
    cfg = update(RunConfig(), tree)
    return Trainer(cfg, PretrainedGPTSpec(cfg, vocab, base), SyntheticTokens(vocab, 16, seed=4), world_size=world)
