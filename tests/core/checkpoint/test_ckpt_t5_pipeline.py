"""A T5 checkpoint saved under pipeline parallelism holds the one-process model: it consolidates into a
single-process model with the same loss, and loads, optimizer state included, into one process and into
another pipeline split, continuing with the same losses. The saving layout puts the decoder's bias table
on both stages; only one copy may be written (two would overlap and fail validation)."""
import json
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.training.batches import get_microbatches
from tests.core.models.workers import FIXED_T5, load_then_probe, save_then_reshard, tree
from tests.helpers.compare import rel
from tests.helpers.distributed import run_ranks

SAVE = tree("t5", {"pp": 2, "pipeline_layers": [3, 1]})  # stage 0: encoder + decoder layer 0
OTHER = tree("t5", {"pp": 2, "vpp": 2})  # four stages of one layer each


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("t5ckpt") / "checkpoints")
    return run_ranks(save_then_reshard, 2, SAVE, root, OTHER, timeout_s=300)[0]


def same(got: dict, want: dict, what: str):
    assert rel(got["fixed"], want["fixed"]) < 1e-5, f"{what}: fixed-batch loss"
    for i, (a, b) in enumerate(zip(got["next"], want["next"])):
        assert rel(a, b) < 1e-5, f"{what}: loss of step {3 + i}: {a} vs {b} (the saving run)"


@pytest.mark.multiprocess
def test_pp2_checkpoint_stores_each_parameter_once(saved):
    with open(os.path.join(saved["path"], "metadata.json")) as f:
        tensors = json.load(f)["tensors"]
    assert "head.weight" not in tensors  # the tied copy is the word embedding
    assert len(tensors["decoder.relative_bias.weight"]["chunks"]) == 1
    assert {"encoder.layers.1.attn.q_proj.weight", "decoder.layers.1.mlp.up_proj.weight"} <= set(tensors)


@pytest.mark.multiprocess
def test_pp2_checkpoint_consolidates_into_one_process_model(saved):
    cfg, model, _ = load_full_model(saved["path"])
    assert cfg.model.arch == "t5"
    t = cfg.train
    total = count = 0.0
    with torch.no_grad():
        for mb in get_microbatches(FIXED_T5, 0, t.global_batch_size, t.micro_batch_size, 1, 0):
            loss_sum, n = model(mb["enc_tokens"], mb["dec_tokens"], mb["labels"], mb["loss_mask"],
                                mb["enc_padding_mask"], mb["dec_padding_mask"])
            total, count = total + float(loss_sum), count + float(n)
    assert rel(total / count, saved["first"]["fixed"]) < 1e-5


@pytest.mark.multiprocess
def test_pp2_checkpoint_resumes_in_one_process_and_another_split(saved):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like a spawned rank (two threads on two busy cores are far slower)
    try:
        one = load_then_probe(0, 1, tree("t5"), saved["path"])
    finally:
        torch.set_num_threads(threads)
    assert one["step"] == saved["other"]["step"] == 2
    same(one, saved["first"], "one process")
    same(saved["other"], saved["first"], "pp2 vpp2")
