"""megatron-core T5 checkpoints (``--ckpt-format torch`` at TP 1 and 2, and ``torch_dist``) → mwb T5: its logits equal megatron-core's
own ``T5Model``'s.

The reference is megatron-core 0.16's ``T5Model`` with learned positions, built on CPU by
tests/helpers/megatron_core_ref.py in one subprocess: tied (Megatron's default: the head is the word embedding
plus a trainable vocab bias, randomised here so a dropped bias shows) and untied (its own ``output_layer``),
each with the stacks' final layernorms (Transformer Engine's spec) and without (the local spec's blocks).
"""
from __future__ import annotations

import argparse
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import ConversionError, convert
from tests.helpers.megatron_core_ckpt import megatron_round_trip, write_core_torch
from tests.helpers.megatron_core_ref import run_reference, t5_spec
from tests.helpers.needs import needs

pytestmark = needs("megatron.core")

V = 61
SPECS = {f"{'tied' if tied else 'untied'}-{'norms' if norms else 'bare'}": t5_spec(V, 64, 11, tied, norms)
         for tied in (True, False) for norms in (True, False)}


def _vocab(d) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    with open(os.path.join(d, "bert-vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")


DIST = ("tied-bare", "untied-norms")  # also saved with dist_checkpointing.save (torch_dist)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcore-t5")
    specs = {n: {**s, "save_dist": str(d / n)} if n in DIST else s for n, s in SPECS.items()}
    out = run_reference(specs, d)
    for n in DIST:
        _vocab(d / n)
        out[n]["dist"] = str(d / n)
    return out


def _logits(out: str, r: dict):
    _, model, _ = load_full_model(out)
    with torch.no_grad():
        return model(r["tokens"], r["dec_tokens"])[..., :V]


def _convert(r: dict, spec: dict, tmp_path, tp: int) -> str:
    save = tmp_path / "save"
    write_core_torch(r, spec, str(save), tp=tp)
    _vocab(save)
    _, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert family == "megatron-t5"
    return out


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("tp", [1, 2])
def test_core_torch_t5_logits_match_megatron_core(ref, tmp_path, name, tp):
    r, spec = ref[name], SPECS[name]
    out = _convert(r, spec, tmp_path, tp)
    m = load_full_model(out)[0].model
    assert (m.arch, m.tie_embeddings, m.t5_final_norm, m.t5_head_bias, m.t5_scale_decoder_output) == \
        ("t5", spec["tied"], spec["final_norm"], spec["tied"], False)
    if spec["tied"]:
        assert r["state"]["lm_head.output_layer.bias"].abs().max() > 0.05  # the bias is really exercised
    assert (_logits(out, r) - r["logits"][..., :V]).abs().max().item() < 1e-5


@pytest.mark.parametrize("name", DIST)
def test_torch_dist_t5_logits_match_megatron_core(ref, tmp_path, name):
    """megatron-core's own torch_dist save: stacked layers and the fused-norm names of its sharded state dict."""
    r = ref[name]
    _, out, family = convert(r["dist"], str(tmp_path / "mwb"))
    assert family == "megatron-t5"
    assert (_logits(out, r) - r["logits"][..., :V]).abs().max().item() < 1e-5


def test_core_torch_t5_with_cross_kv_read_as_k_then_v_differs(ref, tmp_path):
    """The comparison can fail: cross-attention linear_kv rows reordered to [2, np, hn] (all keys, then all
    values) as a reader assuming that layout would take them, change the logits."""
    r, spec = ref["tied-norms"], SPECS["tied-norms"]
    state = dict(r["state"])
    for k in [k for k in state if "cross_attention.linear_kv." in k]:
        t = state[k]
        x = t.view(spec["heads"], 2, -1, *t.shape[1:])
        state[k] = x.transpose(0, 1).reshape(t.shape)
    out = _convert({**r, "state": state}, spec, tmp_path, 1)
    assert (_logits(out, r) - r["logits"][..., :V]).abs().max().item() > 1e-3


def test_relative_positions_are_refused_in_one_line(ref, tmp_path, monkeypatch):
    from tests.helpers import megatron_core_ckpt
    r, spec = ref["untied-norms"], SPECS["untied-norms"]
    real = megatron_core_ckpt.core_args

    def relative(spec, tp, pp) -> argparse.Namespace:
        return argparse.Namespace(**{**vars(real(spec, tp, pp)), "position_embedding_type": "relative"})
    monkeypatch.setattr(megatron_core_ckpt, "core_args", relative)
    with pytest.raises(ConversionError) as e:
        _convert(r, spec, tmp_path, 1)
    msg = str(e.value)
    assert "position_embedding_type 'relative'" in msg and "\n" not in msg
    assert not (tmp_path / "mwb").exists()


def test_pipeline_stages_are_refused_in_one_line(ref, tmp_path):
    """Megatron-LM no longer writes T5 pipeline stages; a PP 2 checkpoint is refused, nothing written."""
    r, spec = ref["untied-norms"], SPECS["untied-norms"]
    save = tmp_path / "save"
    write_core_torch(r, spec, str(save), tp=1, pp=2)
    _vocab(save)
    with pytest.raises(ConversionError) as e:
        convert(str(save), str(tmp_path / "mwb"))
    assert "pipeline parallelism are not supported" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "mwb").exists()


@pytest.mark.parametrize("name", DIST)
def test_writes_torch_dist_t5_megatron_core_loads_and_round_trip_is_exact(ref, tmp_path, capsys, name):
    """mwb T5 → ``--to megatron`` → mwb is bit-exact (tied head with its bias and no final norms; untied with
    them), and megatron-core's ``dist_checkpointing.load`` into its own ``T5Model`` gives the reference logits."""
    r = ref[name]
    mwb = tmp_path / "mwb"
    convert(r["dist"], str(mwb))
    release = megatron_round_trip(mwb, tmp_path, name, capsys)
    got = run_reference({name: {**SPECS[name], "load_dist": release}}, tmp_path)[name]
    assert (got["logits"][..., :V] - r["logits"][..., :V]).abs().max().item() < 1e-5
    assert (_logits(str(tmp_path / f"{name}-back"), r) - r["logits"][..., :V]).abs().max().item() < 1e-5


@pytest.mark.parametrize("change,words", [({"t5_scale_decoder_output": True}, "t5_scale_decoder_output"),
                                          ({"t5_head_bias": False}, "vocab bias exactly when tied"),
                                          ({"position_embedding": "relative"}, "positions 'relative'"),
                                          ({"activation": "geglu_tanh"}, "activation 'geglu_tanh'")])
def test_writing_a_t5_megatron_core_cannot_hold_is_refused_in_one_line(change, words):
    from mwb.core.config import ModelConfig
    from mwb.core.convert.megatron_write import check
    base = dict(arch="t5", num_layers=2, hidden_size=32, tie_embeddings=True, t5_head_bias=True)
    check(ModelConfig(**base))  # the layout megatron-core's T5Model loads passes
    with pytest.raises(ConversionError) as e:
        check(ModelConfig(**{**base, **change}))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_t5_with_stacks_of_different_depth_round_trips_bit_exact(tmp_path, capsys):
    """megatron-core's args give each T5 stack its own depth (``encoder_num_layers``/``decoder_num_layers``):
    the torch_dist reader unstacks each with its own count, so a 2-layer encoder over a 1-layer decoder comes
    back bit-exact (the helper compares every tensor and the model config)."""
    from tests.helpers.checkpoints import tiny_checkpoint
    mwb = tmp_path / "mwb-t5"
    tiny_checkpoint(str(mwb), "t5-tiny", seq=32, num_layers=2, num_decoder_layers=1, hidden_size=32,
                    num_attention_heads=2, ffn_hidden_size=64, tie_embeddings=True, t5_head_bias=True,
                    t5_final_norm=False, t5_scale_decoder_output=False, position_embedding="learned", bias=True,
                    normalization="layernorm", activation="gelu", attention_dropout=0.0)
    megatron_round_trip(mwb, tmp_path, "uneven", capsys)
