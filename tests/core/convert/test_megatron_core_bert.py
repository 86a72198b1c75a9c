"""megatron-core BERT checkpoints (``--ckpt-format torch`` at TP 1/2 and PP 2, and ``torch_dist``) → mwb BERT: its MLM
and binary logits equal megatron-core's own ``BertModel``'s.

The reference is megatron-core 0.16's ``BertModel`` with ``bert_layer_local_spec`` (tied MLM head, two
tokentypes, pooler + binary head), built on CPU by tests/helpers/megatron_core_ref.py in one subprocess that
also saves it with ``dist_checkpointing.save`` in the trainer's ``torch_dist`` layout. Its forward runs with a
padding mask (the second sample ends in padding): megatron-core masks padded queries too (``b1ss``), mwb only
padded keys, so the logits are compared at the real tokens, where both are defined the same way.
"""
from __future__ import annotations

import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import convert
from tests.helpers.megatron_core_ckpt import megatron_round_trip, write_core_torch
from tests.helpers.megatron_core_ref import bert_spec, run_reference
from tests.helpers.needs import needs

pytestmark = needs("megatron.core")

V = 101
SPEC = bert_spec(V, 104, seed=5)


def _vocab(d) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    with open(os.path.join(d, "bert-vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcore-bert")
    out = run_reference({"bert": {**SPEC, "save_dist": str(d / "dist")}}, d)["bert"]
    _vocab(d / "dist")
    return d, out


def _check(out: str, ref: dict) -> None:
    cfg, model, tok = load_full_model(out)
    m = cfg.model
    assert m.arch == "bert" and m.vocab_size == V and m.num_tokentypes == 2 and m.bert_binary_head and tok
    with torch.no_grad():
        lm, binary = model(ref["tokens"], types=ref["types"], padding_mask=ref["padding"])
    real = ref["padding"].bool()
    assert (lm[..., :V][real] - ref["logits"][..., :V][real]).abs().max().item() < 1e-5
    assert (binary - ref["binary_logits"]).abs().max().item() < 1e-5


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (4, 1), (2, 2)])
def test_core_torch_bert_logits_match_megatron_core(ref, tmp_path, tp, pp):
    _, r = ref
    save = tmp_path / "save"
    write_core_torch(r, SPEC, str(save), tp=tp, pp=pp)
    _vocab(save)
    _, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert family == "megatron-bert"
    _check(out, r)


def test_core_torch_bert_with_a_misplaced_head_norm_differs(ref, tmp_path):
    """The comparison can fail: lm_head.layer_norm's weight swapped with the final norm's changes the logits."""
    _, r = ref
    state = dict(r["state"])
    state["lm_head.layer_norm.weight"], state["encoder.final_layernorm.weight"] = \
        state["encoder.final_layernorm.weight"], state["lm_head.layer_norm.weight"]
    save = tmp_path / "save"
    write_core_torch({**r, "state": state}, SPEC, str(save), tp=1)
    _vocab(save)
    _, out, _ = convert(str(save), str(tmp_path / "mwb"))
    _, model, _ = load_full_model(out)
    with torch.no_grad():
        lm, _ = model(r["tokens"], types=r["types"], padding_mask=r["padding"])
    assert (lm[..., :V] - r["logits"][..., :V]).abs().max().item() > 1e-3


def test_torch_dist_bert_logits_match_megatron_core(ref, tmp_path):
    d, r = ref
    _, out, family = convert(str(d / "dist"), str(tmp_path / "mwb"))
    assert family == "megatron-bert"
    _check(out, r)


def test_writes_torch_dist_bert_megatron_core_loads_and_round_trip_is_exact(ref, tmp_path, capsys):
    """mwb BERT → ``--to megatron`` → mwb is bit-exact, and megatron-core's ``dist_checkpointing.load`` into its
    own ``BertModel`` gives the reference MLM and binary logits."""
    d, r = ref
    mwb = tmp_path / "mwb"
    convert(str(d / "dist"), str(mwb))
    release = megatron_round_trip(mwb, tmp_path, "bert", capsys)
    got = run_reference({"bert": {**SPEC, "load_dist": release}}, tmp_path)["bert"]
    real = r["padding"].bool()
    assert (got["logits"][..., :V][real] - r["logits"][..., :V][real]).abs().max().item() < 1e-5
    assert (got["binary_logits"] - r["binary_logits"]).abs().max().item() < 1e-5
    _check(str(tmp_path / "bert-back"), r)


def test_post_norm_bert_is_refused_in_one_line(ref, tmp_path, capsys):
    """Hugging Face's post-norm BERT has no megatron-core layout: one line, exit 1, nothing written."""
    import json
    d, _ = ref
    mwb = tmp_path / "mwb"
    convert(str(d / "dist"), str(mwb))
    meta = json.loads((mwb / "metadata.json").read_text())
    meta["config"]["model"]["bert_post_norm"] = True
    (mwb / "metadata.json").write_text(json.dumps(meta))
    from tests.helpers.cli import run_cli
    code, _, err = run_cli(["convert", str(mwb), str(tmp_path / "out"), "--to", "megatron"], capsys)
    assert code == 1 and "post-norm" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
