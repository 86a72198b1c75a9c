"""T5's two megatron-core options: ``t5_head_bias`` (a vocab bias on the head, which megatron-core's tied T5 trains)
and ``t5_final_norm: false`` (no stack final norms, as megatron-core's local spec builds them). Off by default,
so every existing T5 keeps its parameters; on, the logits are the bias-free / norm-free computation's."""
from dataclasses import replace

import torch
import torch.nn.functional as F

from mwb.core.config import ModelConfig
from mwb.core.models.t5 import T5Model

V = 50
CFG = ModelConfig(arch="t5", num_layers=2, hidden_size=32, num_attention_heads=4, ffn_hidden_size=64,
                  position_embedding="learned", max_position_embeddings=16, dropout=0.0,
                  make_vocab_size_divisible_by=1, t5_scale_decoder_output=False)


def _tokens():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, V, (2, 9), generator=g), torch.randint(0, V, (2, 7), generator=g)


def test_defaults_keep_the_t5_parameters():
    names = set(T5Model(CFG, V).state_dict())
    assert "head.bias" not in names and {"encoder.norm.weight", "decoder.norm.weight"} <= names


def test_head_bias_adds_to_the_logits_and_enters_the_loss():
    torch.manual_seed(0)
    plain = T5Model(CFG, V).eval()
    biased = T5Model(replace(CFG, t5_head_bias=True), V).eval()
    bias = torch.randn(V)
    missing, unexpected = biased.load_state_dict({**plain.state_dict(), "head.bias": bias}, strict=False)
    assert not missing and not unexpected
    enc, dec = _tokens()
    with torch.no_grad():
        want = plain(enc, dec) + bias
        got = biased(enc, dec)
        loss, count = biased(enc, dec, labels=dec)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    ref = F.cross_entropy(want.reshape(-1, V), dec.reshape(-1), reduction="sum")
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    assert count.item() == dec.numel()


def test_without_final_norms_the_stacks_end_at_their_last_layer():
    torch.manual_seed(0)
    normed = T5Model(CFG, V).eval()
    bare = T5Model(replace(CFG, t5_final_norm=False), V).eval()
    state = normed.state_dict()
    assert set(bare.state_dict()) == {k for k in state if ".norm." not in k or ".layers." in k}
    bare.load_state_dict({k: v for k, v in state.items() if k in bare.state_dict()})
    enc, dec = _tokens()
    with torch.no_grad():  # reference: the normed model's layers chained by hand, no final norm
        x = normed.embed(enc)
        for layer in normed.encoder.layers.values():
            x = layer(x, mask=None)
        y = normed.embed(dec)
        causal = None
        for layer in normed.decoder.layers.values():
            y = layer(y, mask=causal, enc=x, cross_mask=None)
        want = normed.head(y)
        got = bare(enc, dec)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert (got - normed(enc, dec)).abs().max() > 1e-3
