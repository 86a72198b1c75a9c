"""BERT and T5 specs: the registry, Megatron's BERT loss semantics, and TP/SP/PP equal to one process."""
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from mwb.core.config import RunConfig, update
from mwb.core.compose import build_model
from mwb.core.parallel.dims import LayoutError
from mwb.core.parallel.state import single_process_state
from mwb.core.training.batches import collate
from mwb.pretraining import BertSpec, GPTSpec, T5Spec, spec_for
from mwb.pretraining.synthetic import SyntheticBert, SyntheticT5
from tests.core.models.workers import SEQ, VOCAB, losses, many_losses, tree
from tests.helpers.distributed import run_ranks
from tests.helpers.compare import rel

TP_RUNS = {
    "bert_tp2": tree("bert", {"tp": 2}),
    "bert_tp2_sp": tree("bert", {"tp": 2, "sp": True}),
    "bert_post_norm_tp2_sp": tree("bert", {"tp": 2, "sp": True}, bert_post_norm=True),
    # the bert-tiny layout: post-norm with rotary positions (tables for the whole sequence under SP)
    "bert_rope_tp2_sp": tree("bert", {"tp": 2, "sp": True}, bert_post_norm=True, position_embedding="rope"),
    "t5_tp2": tree("t5", {"tp": 2}),
    "t5_tp2_sp": tree("t5", {"tp": 2, "sp": True}),
}


def reference_tree(t: dict) -> dict:
    return dict(t, parallel={})




def test_spec_registry():
    assert spec_for("gpt") is GPTSpec and spec_for("bert") is BertSpec and spec_for("t5") is T5Spec
    with pytest.raises(ValueError, match="unknown model arch"):
        spec_for("xlnet")


def test_bert_spec_reports_micro_batch_mean_lm_plus_mean_sop():
    cfg = update(RunConfig(), tree("bert"))
    model = build_model(cfg.model, single_process_state(), VOCAB, seed=1)
    mb = collate([SyntheticBert(VOCAB, SEQ, seed=3)[i] for i in range(4)])
    loss, count = BertSpec(cfg, VOCAB).forward(model, mb)
    with torch.no_grad():
        lm, binary = model(mb["tokens"], mb["types"], mb["padding_mask"])
    sel = mb["loss_mask"].bool()
    want = torch.nn.functional.cross_entropy(lm[sel][:, :VOCAB], mb["labels"][sel]) + \
        torch.nn.functional.cross_entropy(binary, mb["is_random"])
    assert count.item() == 1.0
    torch.testing.assert_close(loss, want)


def test_bert_reports_lm_and_sop_parts_that_add_up_to_the_loss():
    """One micro-batch per step: the step loss is exactly lm_loss + sop_loss (both also in the log)."""
    t = tree("bert")
    t["train"].update(steps=2, global_batch_size=2, micro_batch_size=2)
    for loss, lm, sop in losses(t, 1):
        assert abs(loss - (lm + sop)) < 1e-5 * loss and lm > 3.0 and 0.3 < sop < 1.5


def test_t5_spec_message_shape_comes_from_the_batch():
    """Encoder and decoder lengths differ and the decoder's is the dataset's, not train.seq_length."""
    cfg = update(RunConfig(), tree("t5"))
    mb = collate([SyntheticT5(VOCAB, SEQ, dec_length=6, seed=3)[i] for i in range(3)])
    plain = SimpleNamespace(tp_size=2, sp=False)
    assert T5Spec(cfg, VOCAB).hidden_shape(3, SEQ, plain, batch=mb) == (3, SEQ + 6, 32)
    assert T5Spec(cfg, VOCAB).hidden_shape(3, SEQ, SimpleNamespace(tp_size=2, sp=True), batch=mb) == (3, 11, 32)
    with pytest.raises(LayoutError, match="encoder \\+ decoder layers 4 is not divisible"):
        from mwb.core.training.trainer import parallel_dims
        parallel_dims(update(cfg, {"parallel": {"pp": 3}}), 3)


@pytest.fixture(scope="module")
def references():
    out = {}
    for name, t in TP_RUNS.items():
        key = str(reference_tree(t))
        if key not in out:
            out[key] = losses(reference_tree(t), 1)
    return out


HAVE_PIPELINE = importlib.util.find_spec("mwb.core.pipeline") is not None
# T5's other pipeline layouts, with gradients, are in test_t5_pipeline.py
PP_RUNS = {"bert_pp2": tree("bert", {"pp": 2}), "t5_pp2": tree("t5", {"pp": 2}),
           "bert_rope_pp2": tree("bert", {"pp": 2}, bert_post_norm=True, position_embedding="rope")} \
    if HAVE_PIPELINE else {}


@pytest.fixture(scope="module")
def spawned():
    """Every two-rank layout in one spawned group (starting ranks costs more than these tiny runs).
    Losses are reduced to every rank; rank 1 holds the last pipeline stage in the pp2 run."""
    runs = {**TP_RUNS, **PP_RUNS}
    results = run_ranks(many_losses, 2, list(runs.values()), timeout_s=300)
    return {name: results[1][i] for i, name in enumerate(runs)}


def check(name, got, ref):
    """Every step's loss (and BERT's lm/sop parts) within 1e-5 of one process."""
    assert len(got) == len(ref) == 5
    for step, (a, b) in enumerate(zip(got, ref)):
        for part, x, y in zip(("loss", "lm_loss", "sop_loss"), *(v if isinstance(v, tuple) else (v,) for v in (a, b))):
            assert rel(x, y) < 1e-5, f"{name} step {step + 1}: {part} {x} vs single process {y}"
    first, last = (v[0] if isinstance(v, tuple) else v for v in (ref[0], ref[-1]))
    assert last < first  # it trains


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(TP_RUNS))
def test_tensor_parallel_matches_single_process(name, references, spawned):
    check(name, spawned[name], references[str(reference_tree(TP_RUNS[name]))])


@pytest.mark.multiprocess
@pytest.mark.skipif(not HAVE_PIPELINE, reason="pipeline schedules (mwb.core.pipeline) are not written yet")
@pytest.mark.parametrize("name", ["bert_pp2", "t5_pp2", "bert_rope_pp2"])
def test_pipeline_parallel_matches_single_process(name, references, spawned):
    check(name, spawned[name], references[str(reference_tree(PP_RUNS[name]))])
