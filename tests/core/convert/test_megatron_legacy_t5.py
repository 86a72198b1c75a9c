"""Megatron-LM legacy T5 checkpoints (``language_model`` → ``embedding``/``encoder``/``decoder``, ``lm_head.bias``)
→ mwb T5: its logits equal megatron-core's ``T5Model``'s with the same weights.

The reference is megatron-core 0.16's ``T5Model`` (local spec with final layernorms, tied head with a randomised
vocab bias: the legacy ``T5LMHead``) built on CPU by tests/helpers/megatron_core_ref.py; its state dict is
written in the legacy layout by tests/helpers/megatron_legacy_t5.py (names from Megatron-LM's legacy code) at
TP 1 and 2 and every ``checkpoint_version`` row order, then converted with ``mwb convert``.
"""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import ConversionError, convert
from tests.helpers.megatron_core_ref import run_reference, t5_spec
from tests.helpers.megatron_legacy_t5 import converted_t5_delta, write_legacy_t5
from tests.helpers.needs import needs

pytestmark = needs("megatron.core")

V = 61
SPEC = t5_spec(V, 64, 13, True, True)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return run_reference({"t5": SPEC}, tmp_path_factory.mktemp("legacy-t5"))["t5"]


def _vocab(d) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    with open(os.path.join(d, "bert-vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")


def _delta(r: dict, tmp_path, **kw) -> float:
    save = tmp_path / "save"
    write_legacy_t5(r, SPEC, str(save), **kw)
    _vocab(save)
    _, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert family == "megatron-t5"
    return converted_t5_delta(out, r, V, kw)


@pytest.mark.parametrize("version", [0.0, 1.0, 3.0])
@pytest.mark.parametrize("tp", [1, 2])
def test_legacy_t5_logits_match_megatron_core(ref, tmp_path, tp, version):
    assert ref["state"]["lm_head.output_layer.bias"].abs().max() > 0.05  # the head bias is really exercised
    assert _delta(ref, tmp_path, tp=tp, version=version) < 1e-5


def test_legacy_t5_with_later_norm_names(ref, tmp_path):
    """``input_norm`` / ``post_attention_norm`` / ``post_inter_attention_norm`` / ``final_norm``: later legacy names."""
    assert _delta(ref, tmp_path, tp=2, version=3.0, new=True) < 1e-5


def test_legacy_t5_with_wrong_checkpoint_version_differs(ref, tmp_path):
    """The comparison can fail: version-0 rows (``[3, np, hn]``, cross K/V ``[2, np, hn]``) labelled 3.0."""
    save = tmp_path / "save"
    d = write_legacy_t5(ref, SPEC, str(save), tp=2, version=0.0)
    for r in range(2):
        f = os.path.join(d, f"mp_rank_{r:02d}", "model_optim_rng.pt")
        ck = torch.load(f, weights_only=False)
        torch.save({**ck, "checkpoint_version": 3.0}, f)
    _vocab(save)
    _, out, _ = convert(str(save), str(tmp_path / "mwb"))
    _, model, _ = load_full_model(out)
    with torch.no_grad():
        logits = model(ref["tokens"], ref["dec_tokens"])[..., :V]
    assert (logits - ref["logits"][..., :V]).abs().max().item() > 1e-3


@pytest.mark.parametrize("extra,words", [({"pipeline_model_parallel_size": 2}, "pipeline parallelism"),
                                         ({"swiglu": True}, "SwiGLU"),
                                         ({"position_embedding_type": "rope"}, "position_embedding_type 'rope'")])
def test_legacy_t5_refusals_are_one_line(ref, tmp_path, extra, words):
    save = tmp_path / "save"
    d = write_legacy_t5(ref, SPEC, str(save), args_extra=extra)
    if "pipeline_model_parallel_size" in extra:  # stage directories as a PP 2 run names them
        os.rename(os.path.join(d, "mp_rank_00"), os.path.join(d, "mp_rank_00_000"))
        shutil.copytree(os.path.join(d, "mp_rank_00_000"), os.path.join(d, "mp_rank_00_001"))
    _vocab(save)
    with pytest.raises(ConversionError) as e:
        convert(str(save), str(tmp_path / "mwb"))
    assert words in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "mwb").exists()
