"""MSS pretraining: masked-salient-span samples, and training on them lowers the in-batch loss on fresh queries
(samples the run never drew: other sentences, spans and negatives of its passages)."""
import numpy as np
import pytest
import torch

from mwb.core.config import RunConfig, update
from mwb.core.data.bundled import tokenizer_file
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.batches import collate
from mwb.core.training.trainer import Trainer
from mwb.retrieval.biencoder import RetrievalConfig
from mwb.retrieval.data import MSSDataset
from mwb.retrieval.biencoder_spec import BiEncoderSpec
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, Evidence, read_evidence

RCFG = RetrievalConfig(query_length=24, context_length=64, shared=True, pooling="mean", normalize=True,
                       score_scale="temperature", temperature=0.05)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tokenizer_file())


def test_mss_samples_mask_one_span(tok):
    ev = Evidence("mem", ["1", "2"], ["the cat sat. Isaac Newton was born in 1642. it rained.", "no names here. none."],
                  ["Physics", ""])
    ds = MSSDataset(ev, tok, RCFG.replace(query_in_block_prob=0.0), seed=0)
    assert len(ds.salient) == 1  # the second passage has no salient span
    queries = set()
    for i in range(30):
        s = ds[i]
        q = s["q_tokens"][s["q_mask"] == 1].tolist()
        assert q.count(tok.mask) == 1
        queries.add(tok.decode([t for t in q if t not in (tok.cls, tok.sep)]))
        body = s["c_tokens"][0][s["c_mask"][0] == 1].tolist()
        assert not set(tok.encode(" Newton")) <= set(body)  # the sentence left its block (query_in_block_prob 0)
    assert len(queries) == 2  # either span of the one salient sentence
    assert all(np.array_equal(ds[5][k], ds[5][k]) for k in ds[5])


def held_out_loss(trainer, spec, batch) -> float:
    model = trainer.model
    model.eval()
    with torch.no_grad():
        total, count = spec.forward(model, batch)
    model.train()
    return float(total / count)


def test_mss_training_lowers_loss_on_fresh_queries(tok):
    ev = read_evidence(BUNDLED_EVIDENCE)
    cfg = update(RunConfig(), {"model": {"arch": "bert", "num_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                         "dropout": 0.0, "max_position_embeddings": 64,
                                         "vocab_size": tok.vocab_size},
                               "train": {"steps": 40, "micro_batch_size": 16, "global_batch_size": 16,
                                         "seq_length": 64, "seed": 1},
                               "optim": {"lr": 1e-3, "warmup_steps": 2, "min_lr": 1e-4}})
    rows = range(0, len(ev), max(1, len(ev) // 400))  # passages of every article, not the first few articles
    train = MSSDataset(ev, tok, RCFG, seed=1, rows=list(rows))
    batch = collate([train[10**6 + i] for i in range(32)])  # far past the samples 40 steps draw
    spec = BiEncoderSpec(cfg, tok.vocab_size, RCFG)
    trainer = Trainer(cfg, spec, train)
    before = held_out_loss(trainer, spec, batch)
    trainer.run()
    after = held_out_loss(trainer, spec, batch)
    assert after < before - 0.2, (before, after)
