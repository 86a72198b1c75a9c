"""Shared pieces of the retrieval tests: a word-level tokenizer, synthetic lexical-retrieval data, tiny
configs, and the per-rank function of the data/tensor-parallel equivalence test (importable by spawned ranks).

The synthetic task: a passage is 20 distinct words of a 200-word vocabulary, its question 5 of those words
in random order. It is learnable from scratch in seconds (the signal is lexical overlap), and questions on
new passages test generalisation rather than memorisation.
"""
from __future__ import annotations

import json
import os

import numpy as np

WORDS = [f"w{i}" for i in range(200)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MODEL = {"arch": "bert", "num_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "dropout": 0.0,
         "max_position_embeddings": 64, "vocab_size": len(SPECIAL) + len(WORDS)}
RCFG = {"query_length": 8, "context_length": 24, "hard_negatives": 1, "score_scale": "sqrt"}


def make_tokenizer(directory: str) -> str:
    """A whitespace word-level ``tokenizer.json`` with BERT's special tokens; returns its path."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.normalizers import Lowercase
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = Lowercase()
    tok.pre_tokenizer = Whitespace()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    tok.save(path)
    return path


def passages(n: int, seed: int, length: int = 20) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, length, replace=False)) for _ in range(n)]


def sentence_text(text: str, per: int = 5) -> str:
    """``"W1 w2 w3 w4 w5. W6 …"``: the same words cut into sentences the splitter sees (ICT needs them)."""
    words = text.split()
    sents = [" ".join(words[i:i + per]) for i in range(0, len(words), per)]
    return " ".join(s[0].upper() + s[1:] + "." for s in sents)


def question_for(text: str, rng, k: int = 5) -> str:
    words = text.split()
    return " ".join(rng.choice(words, k, replace=False))


def dpr_records(n: int, seed: int) -> list[dict]:
    """DPR-format records: question, answers (its first word), positive, one random hard negative."""
    rng = np.random.default_rng(seed + 1)
    ps = passages(n, seed)
    out = []
    for i, p in enumerate(ps):
        neg = ps[(i + 1 + int(rng.integers(n - 1))) % n]
        out.append({"question": question_for(p, rng), "answers": [p.split()[0]],
                    "positive_ctxs": [{"title": "", "text": p}],
                    "hard_negative_ctxs": [{"title": "", "text": neg}], "negative_ctxs": []})
    return out


def write_dpr_json(path: str, n: int, seed: int) -> str:
    with open(path, "w") as f:
        json.dump(dpr_records(n, seed), f)
    return path


# ---------------------------------------------------------------------------------- spawned ranks


def train_losses(layout: dict, world: int, tok_path: str, steps: int = 3) -> dict:
    """Loss, grad norm per step and the final query-tower embedding table of a tiny DPR run."""
    from mwb.core.config import RunConfig, update
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.training.trainer import Trainer
    from mwb.retrieval.biencoder import RetrievalConfig
    from mwb.retrieval.data import DPRDataset
    from mwb.retrieval.biencoder_spec import BiEncoderSpec

    cfg = update(RunConfig(), {"model": MODEL, "parallel": layout["parallel"],
                               "train": {"steps": steps, "micro_batch_size": layout["mbs"], "global_batch_size": 4,
                                         "seq_length": RCFG["context_length"], "seed": 3},
                               "optim": {"lr": 1e-3, "warmup_steps": 0}})
    rcfg = RetrievalConfig(**RCFG)
    data = DPRDataset(dpr_records(32, seed=5), load_tokenizer(tok_path), rcfg, seed=9)
    trainer = Trainer(cfg, BiEncoderSpec(cfg, MODEL["vocab_size"], rcfg), data, world_size=world)
    hist = trainer.run()
    from mwb.core.parallel.collectives import _gather
    w = trainer.model.query.embed.word.weight.detach()
    w = _gather(w, 0, trainer.state.tp_group)[: MODEL["vocab_size"]]
    pos = trainer.model.context.layers["0"].ln1.weight.detach()
    return {"loss": [h.loss for h in hist], "grad_norm": [h.grad_norm for h in hist],
            "word": w.clone(), "ln": pos.clone()}


def loss_grads(rank: int, world: int, q, c, per: int):
    """This rank's share of ``in_batch_loss`` over the WORLD group: (loss_sum, q.grad, c.grad)."""
    import torch.distributed as dist

    from mwb.retrieval.biencoder import in_batch_loss

    b = q.size(0) // world
    ql = q[rank * b:(rank + 1) * b].clone().requires_grad_(True)
    cl = c[rank * b * per:(rank + 1) * b * per].clone().requires_grad_(True)
    group = dist.group.WORLD if world > 1 else None
    loss, count, _ = in_batch_loss(ql, cl, per, 2.0, group)
    loss.backward()
    return loss.item(), count.item(), ql.grad.clone(), cl.grad.clone()


def tiny_encoder(tok_path: str):
    from mwb.core.config import RunConfig, update
    from mwb.core.parallel.state import single_process_state
    from mwb.core.tokenizers import load_tokenizer
    from mwb.retrieval.biencoder import RetrievalConfig, build_biencoder

    cfg = update(RunConfig(), {"model": MODEL})
    rcfg = RetrievalConfig(context_length=24)
    model = build_biencoder(cfg.model, rcfg, single_process_state(), MODEL["vocab_size"], seed=1).eval()
    return model, load_tokenizer(tok_path), rcfg


def write_evidence(path: str, n: int = 13) -> str:
    texts = passages(n, seed=4)
    with open(path, "w") as f:
        f.write("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tw{i}\n" for i, t in enumerate(texts)))
    return path


def sharded_embeddings(rank: int, world: int, tok_path: str, evidence: str, cache: str):
    """Embed ``evidence`` over ``world`` ranks (rank r embeds slice r) into ``cache``; the assembled array."""
    import numpy as np
    import torch.distributed as dist

    from mwb.retrieval.index import embed_evidence
    from mwb.retrieval.inputs import read_evidence

    model, tok, rcfg = tiny_encoder(tok_path)
    ev = read_evidence(evidence)
    emb, _, reused = embed_evidence(model, tok, ev, rcfg, "k" * 24, cache_dir=cache, batch_size=4, rank=rank,
                                    world=world, group=dist.group.WORLD if world > 1 else None, progress=False)
    return np.array(emb), reused


def parallel_worker(rank: int, world: int, tok_path: str, layouts: dict, q, c, per: int, evidence: str,
                    cache: str) -> dict:
    out = {"grads": loss_grads(rank, world, q, c, per), "emb": sharded_embeddings(rank, world, tok_path, evidence, cache)}
    for name, layout in layouts.items():
        out[name] = train_losses(layout, world, tok_path)
    return out
