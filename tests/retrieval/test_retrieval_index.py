"""faiss search equals brute-force top-k; passage embeddings do not depend on batching and are cached by
content (sharding over two ranks is checked in test_retrieval_parallel); BM25 finds the lexical match and
its index is reused."""
import numpy as np
import pytest
import torch

pytest.importorskip("faiss")

from mwb.core.config import RunConfig, update
from mwb.core.parallel.state import single_process_state
from mwb.core.tokenizers import load_tokenizer
from mwb.retrieval.biencoder import RetrievalConfig, build_biencoder
from mwb.retrieval.index import DenseIndex, cached_index, embed_evidence, embed_passages, embedding_key
from mwb.retrieval.inputs import Evidence

from .retrieval_helpers import MODEL, make_tokenizer, passages


def brute_force(emb, q, k):
    scores = q @ emb.T
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, idx, 1), idx


def test_flat_and_ivf_search_equal_brute_force(tmp_path):
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((500, 24)).astype(np.float32)
    q = rng.standard_normal((37, 24)).astype(np.float32)
    want_s, want_i = brute_force(emb, q, 20)
    flat = DenseIndex.build(emb, "flat")
    s, i = flat.search(q, 20, batch_size=8)  # several search batches
    assert (i == want_i).all()
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)
    ivf = DenseIndex.build(emb, "ivf", nlist=8, nprobe=8)  # probing every cell is exact
    assert (ivf.search(q, 20)[1] == want_i).all()
    hnsw = DenseIndex.build(emb, "hnsw", ef_search=256)
    recall = np.mean([len(set(a) & set(b)) / 20 for a, b in zip(hnsw.search(q, 20)[1], want_i)])
    assert recall > 0.95
    path = flat.save(str(tmp_path / "flat.faiss"))
    assert (DenseIndex.load(path, "flat").search(q, 5)[1] == want_i[:, :5]).all()
    assert flat.search(q, 10_000)[1].shape == (37, 500)  # k is capped at the corpus size


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    tok_path = make_tokenizer(str(tmp_path_factory.mktemp("tok")))
    cfg = update(RunConfig(), {"model": MODEL})
    rcfg = RetrievalConfig(context_length=24)
    model = build_biencoder(cfg.model, rcfg, single_process_state(), MODEL["vocab_size"], seed=1).eval()
    return model, load_tokenizer(tok_path), tok_path, rcfg


def test_embeddings_are_cached_by_content(encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    model, tok, tok_path, rcfg = encoder
    texts = passages(13, seed=4)
    path = tmp_path / "ev.tsv"
    path.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tw{i}\n" for i, t in enumerate(texts)))
    ev = Evidence(str(path), [str(i) for i in range(13)], texts, [f"w{i}" for i in range(13)])
    ref = embed_passages(model, tok, ev.titles, ev.texts, rcfg, batch_size=13, progress=False)
    with torch.no_grad():  # one passage at a time: batching and padding do not change embeddings
        alone = embed_passages(model, tok, ev.titles[:1], ev.texts[:1], rcfg, progress=False)
    np.testing.assert_allclose(alone[0], ref[0], rtol=1e-5, atol=1e-6)
    key = embedding_key(model, rcfg, tok_path, str(path))
    emb, where, reused = embed_evidence(model, tok, ev, rcfg, key, batch_size=4, progress=False)
    assert not reused and emb.shape == (13, MODEL["hidden_size"])
    np.testing.assert_allclose(emb, ref, rtol=1e-5, atol=1e-6)
    emb2, where2, reused2 = embed_evidence(model, tok, ev, rcfg, key, progress=False)
    assert reused2 and where2 == where
    idx, reused_idx = cached_index(emb, where, "flat")
    assert not reused_idx and cached_index(emb, where, "flat")[1]
    other = embedding_key(model, rcfg.replace(pooling="mean"), tok_path, str(path))
    assert other != key  # settings that change embeddings change the key


def test_bm25_finds_the_lexical_match_and_reuses_its_index(tmp_path, monkeypatch):
    pytest.importorskip("bm25s")
    from mwb.retrieval.bm25 import BM25Retriever

    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    texts = ["the aardvark digs burrows at night", "Luanda is the capital of Angola",
             "Apollo 11 landed on the Moon", "tennis players serve and return"]
    path = tmp_path / "ev.tsv"
    path.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tT{i}\n" for i, t in enumerate(texts)))
    from mwb.retrieval.inputs import read_evidence
    ev = read_evidence(str(path))
    bm = BM25Retriever(ev)
    assert not bm.reused
    scores, rows = bm.search(["what is the capital of Angola?", "who landed on the moon", "the of"], 3)
    assert rows[0, 0] == 1 and rows[1, 0] == 2 and rows.shape == (3, 3)
    assert BM25Retriever(ev).reused
