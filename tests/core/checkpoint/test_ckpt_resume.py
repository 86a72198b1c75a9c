"""Single-process checkpoint behaviour: exact resume (dropout on, bf16 masters), what a checkpoint carries
to be used alone (config, tokenizer), consolidation, pruning, weights-only loading; and expert parallelism."""
import json
import os

import pytest
import torch

from mwb.core import checkpoint
from mwb.core.checkpoint.consolidate import resolve
from mwb.core.compose import consolidate, load_full_model
from tests.core.checkpoint.ckpt_workers import load_then_continue, save_then_continue, tree
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import make_trainer


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_is_bit_identical_with_dropout(tmp_path, precision):
    t = tree()
    t["model"]["dropout"] = 0.1  # every RNG stream matters
    t["train"]["precision"] = precision
    r = save_then_continue(0, 1, t, str(tmp_path / "ck"))
    assert r["step"] == 2
    assert r["second"]["next"] == r["first"]["next"]
    assert r["second"]["fixed_loss"] == r["first"]["fixed_loss"]


def test_checkpoint_is_self_contained(tmp_path):
    tok = tmp_path / "tok.json"
    tok.write_text('{"not": "a real tokenizer, only copied"}')
    trainer = make_trainer(tree(), 1)
    trainer.train_step()
    root = str(tmp_path / "run" / "checkpoints")
    path = checkpoint.save(trainer, root, extra_files={"tokenizer": str(tok)})
    assert os.path.isfile(os.path.join(path, "tokenizer", "tok.json"))
    for p in (str(tmp_path / "run"), root, path):  # every way to name it
        assert resolve(p) == path
    cfg, model, tokpath = load_full_model(str(tmp_path / "run"))
    assert tokpath == os.path.join(path, "tokenizer", "tok.json") and cfg.data.tokenizer == tokpath
    assert cfg.model.hidden_size == 32 and cfg.model.vocab_size == 200 and not model.training
    tokens = torch.randint(0, 200, (2, 8))
    ref = trainer.chunks[0].eval()(tokens=tokens)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens=tokens), ref, rtol=0, atol=0)
        single = str(tmp_path / "model.safetensors")
        consolidate(path, single)
        _, model2, _ = load_full_model(single)
        torch.testing.assert_close(model2(tokens=tokens), ref, rtol=0, atol=0)
    meta = json.load(open(os.path.join(path, "metadata.json")))
    assert meta["config"]["model"]["hidden_size"] == 32 and meta["tokenizer"] == "tokenizer/tok.json"


def test_keep_last_and_weights_only(tmp_path):
    trainer = make_trainer(tree(), 1)
    root = str(tmp_path / "checkpoints")
    for _ in range(3):
        trainer.train_step()
        checkpoint.save(trainer, root, keep_last=2)
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) == ["step_2", "step_3"]
    trainer.train_step()
    checkpoint.save(trainer, root)
    checkpoint.prune(root, 1, keep=["step_2"])  # a fine-tuning run's best survives pruning
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) == ["step_2", "step_4"]
    assert checkpoint.latest_dir(root).endswith("step_4")
    fresh = make_trainer(tree(), 1)
    assert checkpoint.load(fresh, checkpoint.latest_dir(root), model_only=True) == 0
    assert not fresh.optimizer.optimizer.state  # fine-tuning starts with fresh optimizer state


@pytest.mark.multiprocess
def test_expert_parallel_checkpoint_reshards(tmp_path):
    def moe(**p):
        t = tree(**p)
        t["model"].update(num_experts=4, moe_top_k=2)
        return t
    r = run_ranks(save_then_continue, 2, moe(ep=2, distributed_optimizer=True), str(tmp_path / "ck"))[0]
    assert r["second"]["next"] == r["first"]["next"]
    one = load_then_continue(0, 1, moe(), r["path"])
    for a, b in zip(one["next"], r["first"]["next"]):
        assert abs(a - b) / b < 1e-5
    torch.testing.assert_close(one["logits"], r["first"]["logits"], rtol=0, atol=1e-5)


