"""The tensor-parallel plan, not the model, decides where attention dropout draws its random numbers.

``models/`` imports nothing from ``parallel/``: a plain model's attention dropout uses the default torch
stream, and the plan (applied by ``build_model`` at every TP size, 1 included) points ``AttentionCore.dropout_rng``
at the model-parallel stream, as Megatron does for the probabilities of TP-sharded heads.
"""
import torch

from mwb.core.compose import build_model
from mwb.core.config import ModelConfig
from mwb.core.models.arch import make_model
from mwb.core.parallel.random import seed_everything
from mwb.core.parallel.state import single_process_state

VOCAB = 64
CFG = ModelConfig(num_layers=1, hidden_size=32, num_attention_heads=4, dropout=0.0, attention_dropout=0.5,
                  max_position_embeddings=16, make_vocab_size_divisible_by=8)


def _logits(model, burn: int) -> torch.Tensor:
    """Logits after seeding every stream and then drawing ``burn`` numbers from the default stream only."""
    seed_everything(7)
    torch.rand(burn)
    return model(tokens=torch.arange(16).view(2, 8) % VOCAB)


def test_attention_dropout_uses_the_model_parallel_stream_once_the_plan_is_applied():
    built = build_model(CFG, single_process_state(), VOCAB, seed=1).train()
    assert torch.equal(_logits(built, 0), _logits(built, 100))  # untouched by default-stream draws
    built.eval()
    assert not torch.equal(_logits(built, 0), _logits(built.train(), 0))  # dropout really is on

    plain = make_model(CFG, VOCAB, built.padded_vocab_size)
    plain.load_state_dict(built.state_dict())
    plain.train()
    assert not torch.equal(_logits(plain, 0), _logits(plain, 100))  # a plain model: the default stream
