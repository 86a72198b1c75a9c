"""Hugging Face T5 ↔ mwb T5: tiny random ``T5ForConditionalGeneration`` models built offline from a config.

v1.0 style (relu, head tied to ``shared`` and output scaled by d_model^-0.5) and v1.1 style (gated-gelu,
own ``lm_head``, no scaling; and the tied-but-unscaled model recent ``transformers`` builds from a v1.1
config): HF → mwb (``mwb convert``) gives the HF logits; mwb → HF → ``from_pretrained`` gives them again.
"""
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mwb.cli.main import main  # noqa: E402
from mwb.core.compose import load_full_model  # noqa: E402
from mwb.core.convert import ConversionError, convert  # noqa: E402

V = 80


def tiny(ffn: str, tie: bool, own_head: bool = False, seed: int = 0):
    """A tiny T5 with every weight moved off its init (norms and bias tables included)."""
    cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=12, d_ff=48, num_layers=2, num_decoder_layers=3,
                                num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                                dropout_rate=0.0, feed_forward_proj=ffn, tie_word_embeddings=tie)
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(cfg)
    if own_head:  # a v1.1 checkpoint: lm_head is its own matrix
        model.lm_head.weight = torch.nn.Parameter(torch.randn(V, 32) * 0.05)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "layer_norm" in n or "relative_attention_bias" in n else 0.05))
    return model.eval()


def inputs(seed=1, b=3, s_enc=14, s_dec=9):
    g = torch.Generator().manual_seed(seed)
    enc = torch.randint(0, V, (b, s_enc), generator=g)
    dec = torch.randint(0, V, (b, s_dec), generator=g)
    enc_pad = (torch.arange(s_enc)[None] < torch.tensor([s_enc, s_enc - 5, s_enc - 9])[:, None]).long()
    return enc, dec, enc_pad


def hf_logits(model, enc, dec, enc_pad):
    with torch.no_grad():
        return model(input_ids=enc, attention_mask=enc_pad, decoder_input_ids=dec).logits


def mwb_logits(model, enc, dec, enc_pad):
    with torch.no_grad():
        return model(enc, dec, enc_padding_mask=enc_pad)[..., :V]


def close(got, want):
    """≤ 1e-5 relative to the logits' scale (the acceptance bound), element by element."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


CASES = {"v1.0-relu-tied": ("relu", True, False), "v1.1-gated-gelu-own-head": ("gated-gelu", False, True),
         "v1.1-gated-gelu-tied-unscaled": ("gated-gelu", False, False), "gated-silu": ("gated-silu", True, False)}


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip(tmp_path, case):
    ffn, tie, own_head = CASES[case]
    model = tiny(ffn, tie, own_head)
    model.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "spiece.model").write_bytes(b"not read here, only carried")
    enc, dec, enc_pad = inputs()
    ref = hf_logits(model, enc, dec, enc_pad)

    direction, out, family = convert(str(tmp_path / "hf"), str(tmp_path / "mwb"))
    assert (direction, family) == ("hf-to-mwb", "t5")
    cfg, mine, _ = load_full_model(out)
    m = cfg.model
    assert (m.arch, m.position_embedding, m.normalization, m.bias) == ("t5", "relative", "rmsnorm", False)
    assert m.tie_embeddings == (not own_head) and m.t5_scale_decoder_output == tie
    assert m.activation == {"relu": "relu", "gated-gelu": "geglu_tanh", "gated-silu": "swiglu"}[ffn]
    close(mwb_logits(mine, enc, dec, enc_pad), ref)
    _, direct, _ = load_full_model(str(tmp_path / "hf"))  # the HF directory read directly
    close(mwb_logits(direct, enc, dec, enc_pad), ref)

    assert main(["convert", out, str(tmp_path / "back")]) is None
    back = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "back").eval()
    assert type(back) is type(model)
    assert (back.lm_head.weight is back.shared.weight) == (not own_head)
    close(hf_logits(back, enc, dec, enc_pad), ref)
    assert os.path.isfile(tmp_path / "back" / "spiece.model")


def test_relative_bias_lives_in_block_zero_only(tmp_path):
    """HF keeps one bias table per stack in block 0; the mwb stacks own it, and nothing else is left over."""
    tiny("relu", True).save_pretrained(tmp_path / "hf")
    _, out, _ = convert(str(tmp_path / "hf"), str(tmp_path / "mwb"))
    _, mine, _ = load_full_model(out)
    names = [n for n, _ in mine.named_parameters() if "relative" in n]
    assert names == ["encoder.relative_bias.weight", "decoder.relative_bias.weight"]


def test_refusals(tmp_path):
    from mwb.core.config import ModelConfig, RunConfig
    from mwb.core.convert import _mwb_model_dict
    from mwb.core.convert import t5 as t5_family

    megatron = _mwb_model_dict(RunConfig(model=ModelConfig(arch="t5", position_embedding="learned")))
    with pytest.raises(ConversionError, match="learned absolute positions"):
        t5_family.check_mwb(megatron)
    biased = _mwb_model_dict(RunConfig(model=ModelConfig(arch="t5", position_embedding="relative",
                                                         normalization="rmsnorm", bias=True)))
    with pytest.raises(ConversionError, match="no biases"):
        t5_family.check_mwb(biased)
    hf_like = dict(arch="t5", position_embedding="relative", normalization="rmsnorm", bias=False, activation="relu")
    t5_family.check_mwb(_mwb_model_dict(RunConfig(model=ModelConfig(**hf_like))))  # exportable as it is
    for opt in ({"t5_head_bias": True}, {"t5_final_norm": False}):
        with pytest.raises(ConversionError, match="no head bias and always final norms"):
            t5_family.check_mwb(_mwb_model_dict(RunConfig(model=ModelConfig(**hf_like, **opt))))
    with pytest.raises(ConversionError, match="feed_forward_proj 'gated-relu'"):
        t5_family.model_config({"model_type": "t5", "feed_forward_proj": "gated-relu"})
