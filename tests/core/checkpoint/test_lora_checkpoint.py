"""A LoRA run's checkpoint: adapters (and their optimizer state) only, naming its base; a few percent of the
base's size at rank 8; read back as the merged model; resumed exactly; refused by the wrong resume."""
import json
import os

import pytest
import torch

from mwb.core import checkpoint
from mwb.core.compose import full_state, load_full_model
from mwb.core.errors import CheckpointError
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import Trainer
from tests.core.checkpoint.lora_runs import GPT2, LLAMA, lora_trainer, write_base

V = 96


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))


def test_checkpoint_holds_adapters_names_base_and_merges(tmp_path):
    base = str(tmp_path / "base")
    write_base(base, LLAMA, V)
    tr = lora_trainer(base, LLAMA, V)
    tr.run()
    path = checkpoint.save(tr, str(tmp_path / "run" / "checkpoints"))
    meta = json.load(open(os.path.join(path, "metadata.json")))
    assert meta["lora"]["base"] == base and meta["lora"]["prefixes"] == [""]
    assert set(meta["tensors"]) == {n for n, p in tr.model.named_parameters() if p.requires_grad}
    assert all(".lora_" in n for n in meta["tensors"]) and meta["config"]["lora"]["rank"] == 8
    cfg, model, _ = load_full_model(str(tmp_path / "run"))
    assert cfg.lora.rank == 0  # the merged model has no adapters left
    ids = torch.randint(0, V, (2, 12))
    tr.model.eval()
    with torch.no_grad():
        want = tr.model(tokens=ids)[..., :V]
        assert (want - model(tokens=ids)[..., :V]).abs().max() < 1e-5
        base_model = load_full_model(base)[1]
        assert (want - base_model(tokens=ids)[..., :V]).abs().max() > 1e-3  # the adapters changed something


def test_adapter_checkpoint_is_under_five_percent_of_the_base_at_rank_8(tmp_path):
    """Hidden 256, vocab 2048: rank-8 adapters on all four targets against the full model, both checkpoints
    with their optimizer state (what a run writes)."""
    model = dict(GPT2, hidden_size=256, num_layers=2, max_position_embeddings=32)
    base = str(tmp_path / "base")
    write_base(base, model, 2048)
    tr = lora_trainer(base, model, 2048, steps=1)
    tr.run()
    lora_dir = checkpoint.save(tr, str(tmp_path / "lora"))
    full = Trainer(tr.cfg.__class__(**{**tr.cfg.__dict__, "lora": tr.cfg.lora.__class__()}),
                   GPTSpec(tr.cfg, 2048), SyntheticTokens(2048, 16, seed=4))
    full.run()
    full_dir = checkpoint.save(full, str(tmp_path / "full"))
    ratio = dir_bytes(lora_dir) / dir_bytes(full_dir)
    params = tr.lora["trainable"] / (tr.lora["trainable"] + tr.lora["frozen"])
    assert ratio <= 0.05, ratio
    assert abs(ratio - params) < 0.005, (ratio, params)  # the size is the parameter share, nothing else


def test_resume_mid_run_equals_uninterrupted(tmp_path):
    base = str(tmp_path / "base")
    write_base(base, GPT2, V)
    kw = {"lora": {"dropout": 0.1}, "optim": {"decay_steps": 4}}  # the same LR schedule for both runs
    ref = [h.loss for h in lora_trainer(base, GPT2, V, steps=4, **kw).run()]
    first = lora_trainer(base, GPT2, V, steps=2, **kw)
    head = [h.loss for h in first.run()]
    path = checkpoint.save(first, str(tmp_path / "ck"))
    second = lora_trainer(base, GPT2, V, steps=4, **kw)
    assert checkpoint.load(second, path) == 2
    tail = [h.loss for h in second.run()]
    assert head + tail == ref  # bit-identical: adapters, their Adam state and the dropout streams restored


def test_lora_checkpoint_needs_a_lora_resume_and_a_readable_base(tmp_path):
    base = str(tmp_path / "base")
    write_base(base, GPT2, V)
    tr = lora_trainer(base, GPT2, V, steps=1)
    tr.run()
    path = checkpoint.save(tr, str(tmp_path / "run" / "checkpoints"))
    plain = lora_trainer(base, GPT2, V, steps=2, lora={"rank": 0})
    with pytest.raises(CheckpointError, match="LoRA adapters only"):
        checkpoint.load(plain, path)
    import shutil
    shutil.rmtree(base)
    with pytest.raises(CheckpointError, match="LoRA run on the base"):
        full_state(str(tmp_path / "run"))
