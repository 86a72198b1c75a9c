"""Packed rows against one document per row: the same per-document token losses (fp32, 1e-5), with rotary and
with learned positions; a packed trainer step has the unpacked step's loss, gradients and next loss; the padding
metric counts the positions that hold no document; TP 2 + SP and PP 2 take packed rows as one process does."""
import numpy as np
import pytest
import torch

from mwb.core.compose import build_model
from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.data.packing import pack_samples
from mwb.core.parallel.state import single_process_state
from mwb.core.training.batches import collate
from mwb.core.training.model_spec import GPTSpec, PaddingMetric, document_tokens
from mwb.core.training.trainer import Trainer
from tests.helpers.distributed import run_ranks

VOCAB = 97
SEQ = 32  # rows of SEQ + 1 tokens
LENGTHS = (10, 12, 9, 15, 8, 10)  # first-fit into rows of 33: [10, 12, 9] and [15, 8, 10]


class Spec(PaddingMetric, GPTSpec):
    pass


def _tree(position: str, **train) -> dict:
    return {"model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
                      "position_embedding": position, "max_position_embeddings": 64},
            "train": {"seq_length": SEQ, "steps": 2, **train},
            "optim": {"lr": 1e-2, "warmup_steps": 0, "lr_schedule": "constant", "weight_decay": 0.0}}


def documents(lengths=LENGTHS, seed: int = 0) -> list[dict]:
    """One padded GPT sample per length: random tokens, the first 1-3 of them a prompt (no loss)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        prompt = int(rng.integers(1, 4))
        tokens = np.zeros(SEQ + 1, dtype=np.int64)
        tokens[:n] = rng.integers(1, VOCAB, n)
        mask = np.zeros(SEQ + 1, dtype=np.int64)
        mask[prompt:n] = 1
        out.append({"tokens": tokens, "loss_mask": mask})
    return out


def _token_losses(model, batch: dict, spec) -> torch.Tensor:
    """Per-label cross-entropy ``[b, SEQ]`` of one micro-batch through the spec's forward (logits, no labels)."""
    t = batch["tokens"]
    kw = {}
    if "doc_ids" in batch:
        kw = {"document_ids": batch["doc_ids"][:, :-1], "position_ids": batch["position_ids"][:, :-1]}
    logits = model(tokens=t[:, :-1], **kw)[..., :VOCAB].float()
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none")


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_per_document_losses_equal_unpacked(position):
    cfg = update(RunConfig(), _tree(position))
    model = build_model(cfg.model, single_process_state(), VOCAB, seed=3)
    model.eval()
    docs = documents()
    rows, info = pack_samples(docs, SEQ + 1)
    assert info.rows == 2
    spec = Spec(cfg, VOCAB)
    with torch.no_grad():
        packed = _token_losses(model, collate(rows), spec)
        alone = _token_losses(model, collate(docs), spec)
    # document d of row r occupies the positions where doc_ids == d; its labels are the next tokens
    got = []
    for r, row in enumerate(rows):
        ids, mask = row["doc_ids"], row["loss_mask"]
        for d in range(int(ids.max()) + 1):
            at = np.flatnonzero((ids[1:] == d) & (mask[1:] == 1))  # labels of document d that carry a loss
            got.append(packed[r, at].numpy())
    want = [alone[i, np.flatnonzero(docs[i]["loss_mask"][1:])].numpy() for i in range(len(docs))]
    assert [len(g) for g in got] == [len(w) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # and through the training spec: Σ loss and Σ target tokens of the packed rows equal the unpacked ones
    with torch.no_grad():
        a = spec.forward(model, collate(rows))
        b = spec.forward(model, collate(docs))
    assert float(a[1]) == float(b[1]) == sum(int(d["loss_mask"][1:].sum()) for d in docs)
    assert float(a[0]) == pytest.approx(float(b[0]), rel=1e-6)


def test_padding_metric_counts_positions_without_a_document():
    docs = documents()
    rows, _ = pack_samples(docs, SEQ + 1)
    real, total = document_tokens(collate(docs))
    assert (int(real), int(total)) == (sum(LENGTHS), len(LENGTHS) * SEQ)
    real, total = document_tokens(collate(rows))
    # row 0 holds 31 tokens (all inputs); row 1 is full: its last token is only a label
    assert (int(real), int(total)) == (31 + 32, 2 * SEQ)


def _trainer(rows, gbs: int, mbs: int, position: str = "rope", world: int = 1, **parallel) -> Trainer:
    tree = _tree(position, global_batch_size=gbs, micro_batch_size=mbs, pack="doc_ids" in rows[0])
    tree["parallel"] = parallel
    cfg = update(RunConfig(), tree)
    return Trainer(cfg, Spec(cfg, VOCAB), rows, world_size=world)


def test_packed_step_equals_unpacked_step():
    docs = documents()
    rows, _ = pack_samples(docs, SEQ + 1)
    unpacked = _trainer(docs, gbs=6, mbs=3).run()
    packed = _trainer(rows, gbs=2, mbs=1).run()
    # step 1: the same documents, the same mean over their target tokens; step 2 (after the update from step 1's
    # gradients): the same again, so the gradients were the same
    for u, p in zip(unpacked, packed):
        assert p.loss == pytest.approx(u.loss, rel=1e-5)
        assert p.grad_norm == pytest.approx(u.grad_norm, rel=1e-4)
    assert packed[0].extra["padding"] == pytest.approx(1 - 63 / 64)
    assert unpacked[0].extra["padding"] == pytest.approx(1 - sum(LENGTHS) / (6 * SEQ))


def test_pack_flag_without_packed_rows_is_an_error():
    cfg = update(RunConfig(), _tree("rope", pack=True))
    model = build_model(cfg.model, single_process_state(), VOCAB, seed=3)
    with pytest.raises(ConfigError, match="not packed"):
        GPTSpec(cfg, VOCAB).forward(model, collate(documents()[:1]))


def _layout_losses(rank: int, world: int, parallel: dict) -> list:
    rows, _ = pack_samples(documents(LENGTHS * 2, seed=1), SEQ + 1)
    return [h.loss for h in _trainer(rows, gbs=4, mbs=1, world=world, **parallel).run()]


@pytest.mark.multiprocess
@pytest.mark.parametrize("parallel", [{"tp": 2, "sp": True}, {"pp": 2}], ids=["tp2-sp", "pp2"])
def test_packed_rows_under_tp_sp_and_pp_equal_one_process(parallel):
    rows, info = pack_samples(documents(LENGTHS * 2, seed=1), SEQ + 1)
    assert info.rows == 4
    one = [h.loss for h in _trainer(rows, gbs=4, mbs=1).run()]
    two = run_ranks(_layout_losses, 2, parallel)[0]
    assert len(one) == len(two) == 2
    assert max(abs(a - b) / abs(a) for a, b in zip(one, two)) < 1e-5, (one, two)
