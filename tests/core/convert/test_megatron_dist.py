"""megatron-core ``torch_dist`` checkpoints: read what megatron-core's own ``dist_checkpointing.save`` wrote,
write one (``mwb convert --to megatron``) that megatron-core's ``dist_checkpointing.load`` puts into its
``GPTModel`` with the same logits, and a round trip mwb → Megatron → mwb that is bit-exact.

Two subprocesses of tests/helpers/megatron_core_ref.py (megatron-core needs a process group): one builds the
reference models and saves them as Megatron-LM's trainer does (release/, args in common.pt); one loads the
checkpoints mwb wrote.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import convert
from tests.helpers.cli import run_cli
from tests.helpers.megatron_core_ckpt import megatron_round_trip
from tests.helpers.megatron_core_ref import run_reference, tiny_specs
from tests.helpers.needs import needs

pytestmark = needs("megatron.core")

V = 101
SPECS = tiny_specs(V, 104, (3, 4), llama_groups=2)


def _vocab(d) -> None:
    with open(os.path.join(d, "gpt2-vocab.json"), "w", encoding="utf-8") as f:
        json.dump({chr(33 + i): i for i in range(V)}, f)
    with open(os.path.join(d, "gpt2-merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist")
    specs = {n: {**s, "save_dist": str(d / n)} for n, s in SPECS.items()}
    refs = run_reference(specs, d)
    for n in SPECS:
        _vocab(d / n)
    return d, refs


def test_reads_megatron_core_torch_dist(saved, tmp_path):
    d, refs = saved
    for name, spec in SPECS.items():
        _, out, family = convert(str(d / name), str(tmp_path / name))
        assert family == "megatron-gpt"
        cfg, model, tok = load_full_model(out)
        assert cfg.model.vocab_size == V and cfg.model.query_groups == spec["groups"] and tok
        with torch.no_grad():
            got = model(refs[name]["tokens"])
        assert (got[..., :V] - refs[name]["logits"][..., :V]).abs().max().item() < 1e-5, name


def test_writes_torch_dist_megatron_core_loads_and_round_trip_is_exact(saved, tmp_path, capsys):
    d, refs = saved
    loads = {}
    for name in SPECS:
        mwb = tmp_path / f"{name}-mwb"
        convert(str(d / name), str(mwb))
        loads[name] = {**SPECS[name], "load_dist": megatron_round_trip(mwb, tmp_path, name, capsys)}
    got = run_reference(loads, tmp_path)
    for name in SPECS:  # megatron-core's own loader into its own GPTModel gives the original logits
        assert (got[name]["logits"][..., :V] - refs[name]["logits"][..., :V]).abs().max().item() < 1e-5, name


def test_missing_distcp_shard_fails_in_one_line(saved, tmp_path, capsys):
    import shutil
    d, _ = saved
    broken = tmp_path / "broken"
    shutil.copytree(d / "gpt2like", broken)
    os.remove(broken / "release" / "__0_0.distcp")
    code, out, err = run_cli(["convert", str(broken), str(tmp_path / "out")], capsys)
    assert code == 1 and "shard __0_0.distcp" in err and "missing" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
