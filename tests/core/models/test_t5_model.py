"""T5: relative buckets and outputs match Hugging Face T5, padding invariance, pipeline stages chain."""
from dataclasses import replace

import pytest
import torch

from mwb.core.config import ModelConfig
from mwb.core.models.t5 import T5Model, relative_position_bucket
from mwb.core.parallel.dims import LayoutError

V = 64
CFG = ModelConfig(arch="t5", num_layers=2, num_decoder_layers=2, hidden_size=32, num_attention_heads=4,
                  kv_channels=8, ffn_hidden_size=64, activation="relu", position_embedding="relative",
                  bias=False, normalization="rmsnorm", norm_eps=1e-6, dropout=0.0,
                  relative_attention_num_buckets=8, relative_attention_max_distance=20)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 20), (16, 50)])
def test_bucket_matches_hf(bidirectional, buckets, max_distance):
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-300, 301)[:, None] + torch.arange(-3, 4)[None, :]
    want = modeling_t5.T5Attention._relative_position_bucket(rel, bidirectional, buckets, max_distance)
    got = relative_position_bucket(rel, bidirectional, buckets, max_distance)
    assert torch.equal(got, want)
    assert 0 <= got.min() and got.max() < buckets


def hf_to_mwb(sd: dict, enc_layers: int, dec_layers: int) -> dict:
    m = {"shared.weight": "embed.word.weight", "lm_head.weight": "head.weight",
         "encoder.final_layer_norm.weight": "encoder.norm.weight",
         "decoder.final_layer_norm.weight": "decoder.norm.weight",
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "encoder.relative_bias.weight",
         "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "decoder.relative_bias.weight"}
    for stack, n in (("encoder", enc_layers), ("decoder", dec_layers)):
        for i in range(n):
            hf, mw = f"{stack}.block.{i}.layer.", f"{stack}.layers.{i}."
            m[hf + "0.layer_norm.weight"] = mw + "ln1.weight"
            for x in "qkvo":
                m[f"{hf}0.SelfAttention.{x}.weight"] = f"{mw}attn.{x}_proj.weight"
            ff = 1
            if stack == "decoder":
                ff = 2
                m[hf + "1.layer_norm.weight"] = mw + "ln_cross.weight"
                for x in "qkvo":
                    m[f"{hf}1.EncDecAttention.{x}.weight"] = f"{mw}cross_attn.{x}_proj.weight"
            m[f"{hf}{ff}.layer_norm.weight"] = mw + "ln2.weight"
            m[f"{hf}{ff}.DenseReluDense.wi.weight"] = mw + "mlp.up_proj.weight"
            m[f"{hf}{ff}.DenseReluDense.wo.weight"] = mw + "mlp.down_proj.weight"
    return {m[k]: v for k, v in sd.items() if k in m}


def batch(seed=0, b=3, s_enc=12, s_dec=7):
    g = torch.Generator().manual_seed(seed)
    enc = torch.randint(0, V, (b, s_enc), generator=g)
    dec = torch.randint(0, V, (b, s_dec), generator=g)
    enc_pad = (torch.arange(s_enc)[None] < torch.tensor([s_enc, s_enc - 4, s_enc - 7])[:b, None]).long()
    dec_pad = (torch.arange(s_dec)[None] < torch.tensor([s_dec, s_dec - 2, s_dec - 3])[:b, None]).long()
    return enc, dec, enc_pad, dec_pad


def test_matches_hf_t5_for_conditional_generation():
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8,
                                   relative_attention_max_distance=20, dropout_rate=0.0,
                                   feed_forward_proj="relu", tie_word_embeddings=True, layer_norm_epsilon=1e-6)
    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(hf_cfg).eval()
    with torch.no_grad():  # T5's init scales differ from ours; make norms and biases visibly non-trivial
        for n, p in hf.named_parameters():
            if "layer_norm" in n or "relative_attention_bias" in n:
                p.add_(0.3 * torch.randn_like(p))
    model = T5Model(CFG, V, V).eval()
    mapped = hf_to_mwb(hf.state_dict(), 2, 2)
    assert set(mapped) == set(model.state_dict())
    model.load_state_dict(mapped)
    enc, dec, enc_pad, dec_pad = batch()
    with torch.no_grad():
        want = hf(input_ids=enc, attention_mask=enc_pad, decoder_input_ids=dec,
                  decoder_attention_mask=dec_pad).logits
        got = model(enc, dec, enc_padding_mask=enc_pad, dec_padding_mask=dec_pad)
    real = dec_pad.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["relative", "learned"])
def test_padding_never_changes_real_positions(position):
    torch.manual_seed(1)
    model = T5Model(replace(CFG, position_embedding=position), V, V).eval()
    enc, dec, enc_pad, dec_pad = batch(seed=2)
    enc2 = torch.where(enc_pad.bool(), enc, torch.randint(0, V, enc.shape))
    dec2 = torch.where(dec_pad.bool(), dec, torch.randint(0, V, dec.shape))
    labels = torch.where(dec_pad.bool(), torch.randint(0, V, dec.shape), -1)
    with torch.no_grad():
        a = model(enc, dec, enc_padding_mask=enc_pad, dec_padding_mask=dec_pad)
        b = model(enc2, dec2, enc_padding_mask=enc_pad, dec_padding_mask=dec_pad)
        la = model(enc, dec, labels, dec_pad, enc_pad, dec_pad)
        lb = model(enc2, dec2, labels, dec_pad, enc_pad, dec_pad)
    real = dec_pad.bool()
    # fp32 BLAS is not bitwise reproducible across calls/alignments: tolerate rounding, not leakage
    torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(la[0], lb[0], rtol=1e-5, atol=1e-5)
    assert la[1] == real.sum()
    assert not torch.allclose(a[~real], b[~real])


@pytest.mark.parametrize("position", ["relative", "learned"])
@pytest.mark.parametrize("split", [[2, 2], [3, 1], [1, 1, 1, 1]])
def test_pipeline_stages_chain_to_the_whole_model(position, split):
    """Stages built from consecutive ranges of the encoder-then-decoder layers hold the whole model's
    parameters under the same names (a bias table on every stage running its stack, the tied head as a copy
    of the word embedding), and chaining their messages gives the whole model's loss."""
    from mwb.core.compose import build_model
    from mwb.core.parallel.state import single_process_state
    cfg = replace(CFG, position_embedding=position)
    st = single_process_state()
    whole = build_model(cfg, st, V, seed=3)
    full = dict(whole.named_parameters())
    starts = [sum(split[:i]) for i in range(len(split))]
    stages = [build_model(cfg, st, V, seed=3, layer_ids=range(a, a + n), pre_process=a == 0,
                          post_process=a + n == 4) for a, n in zip(starts, split)]
    names = set()
    for stage in stages:
        for name, p in stage.named_parameters():
            want = full["embed.word.weight"] if name == "head.weight" else full[name]
            assert torch.equal(p, want), name
            names.add(name)
    assert names - {"head.weight"} == set(full)
    enc, dec, enc_pad, dec_pad = batch(seed=5)
    labels = torch.where(dec_pad.bool(), dec, -1)
    with torch.no_grad():
        want = whole(enc, dec, labels, dec_pad, enc_pad, dec_pad)
        hidden = None
        for stage in stages:  # the last stage returns (loss_sum, count)
            hidden = stage(enc, dec, labels if stage.post_process else None, dec_pad, enc_pad, dec_pad,
                           hidden=hidden)
    assert hidden[0].shape == () and torch.equal(hidden[1], want[1])
    torch.testing.assert_close(hidden[0], want[0], rtol=1e-6, atol=1e-6)


def test_stage_layers_must_match_the_embedding_and_head():
    with pytest.raises(LayoutError, match="embedding belongs with layer 0"):
        T5Model(CFG, V, V, layer_ids=[1, 2], pre_process=True, post_process=False)
    with pytest.raises(LayoutError, match="consecutive"):
        T5Model(CFG, V, V, layer_ids=[0, 2], pre_process=True, post_process=False)


def test_full_recompute_covers_both_stacks():
    from types import SimpleNamespace

    from mwb.core.parallel.recompute import apply_recompute, layer_stacks
    torch.manual_seed(4)
    ref, model = T5Model(CFG, V, V), T5Model(CFG, V, V)
    model.load_state_dict(ref.state_dict())
    apply_recompute(model, SimpleNamespace(recompute="full", recompute_method="uniform", recompute_num_layers=1))
    assert [len(s) for s in layer_stacks(model)] == [2, 2]
    enc, dec, enc_pad, dec_pad = batch(seed=6)
    labels = torch.where(dec_pad.bool(), dec, -1)
    for m in (ref, model):
        m(enc, dec, labels, dec_pad, enc_pad, dec_pad)[0].backward()
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6, msg=name)
