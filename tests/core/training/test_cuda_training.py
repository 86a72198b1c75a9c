"""Training on a CUDA device computes what the CPU computes (skipped without CUDA; run by
``benchmarks/gpu_mfu.py`` on a lent GPU).

fp32 on CUDA (TF32 off) gives the CPU's per-step losses within 1e-4 relative: the kernels differ (cuBLAS,
the memory-efficient SDPA kernel), the arithmetic does not. bf16 on CUDA (bf16 weights and activations, fp32
master weights and gradient buffer, flash attention) tracks the fp32 losses within bf16 rounding. Compiled
blocks (inductor, Triton kernels) give the eager fp32 losses within 1e-5, as on CPU.
"""
import copy

import pytest
import torch

from mwb.core.config import RunConfig, update
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

VOCAB = 512
TREE = {"model": {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 4, "dropout": 0.0,
                  "max_position_embeddings": 128},
        "optim": {"lr": 1e-3, "clip_grad": 1.0},
        "train": {"steps": 4, "micro_batch_size": 2, "global_batch_size": 4, "seq_length": 128, "seed": 3}}


def _losses(device: str, **train) -> list[float]:
    tree = copy.deepcopy(TREE)
    tree["train"].update(train)
    cfg = update(RunConfig(), tree)
    trainer = Trainer(cfg, GPTSpec(cfg, VOCAB), SyntheticTokens(VOCAB, cfg.train.seq_length, seed=7), device=device)
    return [trainer.train_step().loss for _ in range(cfg.train.steps)]


def _rel(a, b) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def test_cuda_fp32_losses_equal_cpu():
    cpu, gpu = _losses("cpu"), _losses("cuda")
    assert _rel(gpu, cpu) <= 1e-4, (gpu, cpu)
    assert gpu[-1] < gpu[0]  # it learns


def test_cuda_bf16_tracks_fp32():
    fp32, bf16 = _losses("cuda"), _losses("cuda", precision="bf16")
    assert _rel(bf16, fp32) <= 2e-2, (bf16, fp32)


def test_cuda_compiled_blocks_give_the_eager_losses():
    torch._dynamo.reset()
    eager, compiled = _losses("cuda"), _losses("cuda", compile=True)
    assert _rel(compiled, eager) <= 1e-5, (compiled, eager)
