"""megatron-core ``--ckpt-format torch`` checkpoints → mwb: logits equal megatron-core's own GPTModel's.

The reference is megatron-core 0.16 itself (tests/helpers/megatron_core_ref.py, one subprocess for all
models): GPT-2-like (learned positions, LayerNorm, gelu, MHA, tied, biases) and Llama-like (RoPE, RMSNorm,
SwiGLU, GQA, untied, no biases). Its TP-1 state dicts are split into TP 2/4 and PP 2 shards the way
megatron-core shards its layers (tests/helpers/megatron_core_ckpt.py).
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import convert
from tests.helpers.megatron_core_ckpt import write_core_torch
from tests.helpers.megatron_core_ref import run_reference, tiny_specs
from tests.helpers.needs import needs

pytestmark = needs("megatron.core")

V = 101
SPECS = tiny_specs(V, 128, (1, 2), llama_groups=4)


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcore")
    return run_reference(SPECS, d)


def _vocab(d: str) -> None:
    with open(os.path.join(d, "gpt2-vocab.json"), "w", encoding="utf-8") as f:
        json.dump({chr(33 + i): i for i in range(V)}, f)
    with open(os.path.join(d, "gpt2-merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


@pytest.mark.parametrize("name,tp,pp", [("gpt2like", 1, 1), ("gpt2like", 2, 2), ("gpt2like", 4, 1),
                                        ("llamalike", 1, 1), ("llamalike", 2, 1), ("llamalike", 4, 1),
                                        ("llamalike", 2, 2)])
def test_core_torch_logits_match_megatron_core(refs, tmp_path, name, tp, pp):
    spec, ref = SPECS[name], refs[name]
    save = tmp_path / "save"
    write_core_torch(ref, spec, str(save), tp=tp, pp=pp)
    _vocab(str(save))
    _, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert family == "megatron-gpt"
    cfg, model, _ = load_full_model(out)
    assert cfg.model.vocab_size == V and cfg.model.tie_embeddings == spec["tied"]
    assert cfg.model.query_groups == spec["groups"]
    with torch.no_grad():
        got = model(ref["tokens"])
    assert (got[..., :V] - ref["logits"][..., :V]).abs().max().item() < 1e-5
