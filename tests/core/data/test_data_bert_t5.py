"""BERT masking statistics and pair structure; T5 span corruption density and reconstruction."""
from __future__ import annotations

import numpy as np
import pytest

from mwb.core.data import build_datasets
from mwb.core.data.t5 import noise_mask, span_counts
from mwb.core.errors import DataError

BERT_KEYS = {"tokens", "types", "labels", "loss_mask", "padding_mask", "is_random"}
T5_KEYS = {"enc_tokens", "dec_tokens", "labels", "loss_mask", "enc_padding_mask", "dec_padding_mask"}


def test_bert_masking_rates(sent_prefix, tok):
    seq = 64
    train, _, _ = build_datasets("bert", [sent_prefix], tok, seq, 1234, "949,50,1", (1500, 0, 0))
    specials = {tok.cls, tok.sep, tok.pad}
    cand = pred = as_mask = kept = swapped = short = 0
    for i in range(len(train)):
        s = train[i]
        assert set(s) == BERT_KEYS and all(v.dtype == np.int64 for v in s.values())
        assert s["tokens"].shape == (seq,) and s["is_random"].shape == ()
        n = int(s["padding_mask"].sum())
        t, lab, lm = s["tokens"], s["labels"], s["loss_mask"].astype(bool)
        assert t[0] == tok.cls and t[n - 1] == tok.sep and (t[n:] == tok.pad).all() and s["padding_mask"][:n].all()
        seps = np.flatnonzero(t[:n] == tok.sep)
        assert len(seps) >= 2 and (s["types"][:seps[0] + 1] == 0).all() and (s["types"][seps[0] + 1:n] == 1).all()
        assert ((lab >= 0) == lm).all() and not lm[n:].any()
        cand += n - 3
        pred += int(lm.sum())
        as_mask += int((t[lm] == tok.mask).sum())
        kept += int((t[lm] == lab[lm]).sum())
        swapped += int(s["is_random"])
        short += n < seq - 8
    assert abs(pred / cand - 0.15) < 0.01  # 15% of the non-special tokens are predicted
    assert abs(as_mask / pred - 0.8) < 0.02 and abs(kept / pred - 0.1) < 0.02  # 80 / 10 / (10 random)
    assert abs(swapped / len(train) - 0.5) < 0.05
    assert 0.03 < short / len(train) < 0.2  # short_seq_prob 0.1 (plus documents that run out)
    again, _, _ = build_datasets("bert", [sent_prefix], tok, seq, 1234, "949,50,1", (1500, 0, 0))
    assert again.cache_reused and all(np.array_equal(again[i]["tokens"], train[i]["tokens"]) for i in range(50))


def test_bert_needs_specials(sent_prefix, tmp_path):
    import sentencepiece as spm

    # a SentencePiece model without [CLS]/[SEP]/[MASK]: BERT must refuse it, naming what is missing
    (tmp_path / "t.txt").write_text("some plain words here\n" * 20)
    spm.SentencePieceTrainer.train(input=str(tmp_path / "t.txt"), model_prefix=str(tmp_path / "plain"),
                                   vocab_size=30, hard_vocab_limit=False, minloglevel=2)
    with pytest.raises(DataError, match=r"no cls \(\[CLS\]\)"):
        build_datasets("bert", [sent_prefix], str(tmp_path / "plain.model"), 64, 1, "949,50,1", (4, 0, 0))


def test_t5_span_corruption(doc_prefix, tok):
    seq = 96
    train, valid, _ = build_datasets("t5", [doc_prefix], tok, seq, 99, "949,50,1", (400, 8, 0))
    dec = train.decoder_seq_length
    raw_len = train.raw_length
    noise, spans = span_counts(raw_len)
    assert abs(noise / raw_len - 0.15) < 0.01 and abs(noise / spans - 3) < 0.5
    sentinels = tok.sentinel_ids(spans)
    total_noise = 0
    for i in range(len(train)):
        s = train[i]
        assert set(s) == T5_KEYS and s["enc_tokens"].shape == (seq,) and s["dec_tokens"].shape == (dec,)
        enc = s["enc_tokens"][s["enc_padding_mask"].astype(bool)]
        lab = s["labels"][s["loss_mask"].astype(bool)]
        assert enc[-1] == tok.eos and lab[-1] == tok.eos
        assert s["dec_tokens"][0] == tok.cls or s["dec_tokens"][0] == tok.bos or s["dec_tokens"][0] == tok.eod
        assert np.array_equal(s["dec_tokens"][1:len(lab)], lab[:-1])  # decoder input = labels shifted right
        # put every span back in place of its sentinel: the original window comes back
        spans_of = {}
        cur = None
        for t in lab[:-1]:
            if t in sentinels:
                cur = int(t)
                spans_of[cur] = []
            else:
                spans_of[cur].append(int(t))
        rebuilt = []
        for t in enc[:-1]:
            rebuilt.extend(spans_of[int(t)] if int(t) in spans_of else [int(t)])
        assert rebuilt == train.windows[i]["tokens"].tolist()
        total_noise += sum(len(v) for v in spans_of.values())
        assert list(spans_of) == sentinels[:len(spans_of)]
    assert abs(total_noise / (len(train) * raw_len) - 0.15) < 0.01


def test_noise_mask_shape():
    rng = np.random.RandomState(0)
    for L in (10, 57, 300):
        m = noise_mask(L, rng)
        noise, spans = span_counts(L)
        assert len(m) == L and m.sum() == noise and not m[0]
        assert int((m[1:] & ~m[:-1]).sum()) == spans  # number of runs of noise
