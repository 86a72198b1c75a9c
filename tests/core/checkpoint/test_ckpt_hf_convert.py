"""Hugging Face ↔ mwb: GPT-2, Llama and BERT built offline from small configs with random weights.

HF → mwb (``mwb convert``) → logits of the mwb model equal the HF model's; mwb → HF → ``from_pretrained``
gives the original logits again; ``load_full_model`` reads the HF directory directly too.
"""
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mwb.cli.main import main  # noqa: E402
from mwb.core.compose import load_full_model  # noqa: E402
from mwb.core.convert import ConversionError, convert  # noqa: E402

V = 100


def gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, bos_token_id=0,
                                  eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg), transformers.AutoModelForCausalLM


def llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, vocab_size=V, rope_theta=500.0, bos_token_id=0,
                                   eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg), transformers.AutoModelForCausalLM


def bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=V, max_position_embeddings=64)
    return transformers.BertForMaskedLM(cfg), transformers.AutoModelForMaskedLM


def hf_logits(model, ids):
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out.prediction_logits


def mwb_logits(model, ids):
    out = model(tokens=ids)
    return (out[0] if isinstance(out, tuple) else out)[..., :V]


@pytest.mark.parametrize("make", [gpt2, llama, bert], ids=["gpt2", "llama", "bert"])
def test_round_trip(tmp_path, make):
    torch.manual_seed(0)
    model, auto = make()
    with torch.no_grad():  # move norms and biases away from their trivial init
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.eval().save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(V)))  # a tokenizer file to carry
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        ref = hf_logits(model, ids)
        direction, out, family = convert(str(tmp_path / "hf"), str(tmp_path / "mwb"))
        assert direction == "hf-to-mwb" and family == make.__name__
        cfg, mine, tok = load_full_model(out)
        assert tok and os.path.basename(tok) == "tokenizer" and os.path.isfile(os.path.join(tok, "vocab.txt"))
        torch.testing.assert_close(mwb_logits(mine, ids), ref, rtol=0, atol=1e-5)
        _, direct, _ = load_full_model(str(tmp_path / "hf"))
        torch.testing.assert_close(mwb_logits(direct, ids), ref, rtol=0, atol=1e-5)
        assert main(["convert", out, str(tmp_path / "back")]) is None
        back = auto.from_pretrained(tmp_path / "back").eval()
        assert type(back) is type(model)
        torch.testing.assert_close(hf_logits(back, ids), ref, rtol=0, atol=1e-5)
        assert os.path.isfile(tmp_path / "back" / "vocab.txt")


def test_gpt2_activation_is_tanh_gelu(tmp_path):
    """GPT-2's gelu_new is the tanh approximation: it must map to mwb's gelu_tanh, not exact gelu."""
    model, _ = gpt2()
    model.eval().save_pretrained(tmp_path / "hf")
    cfg, mine, _ = load_full_model(str(tmp_path / "hf"))
    assert cfg.model.activation == "gelu_tanh"
    assert mine.layers["0"].mlp.gelu_approximate == "tanh"


def test_refusals(tmp_path):
    with pytest.raises(ConversionError, match="does not exist"):
        convert(str(tmp_path / "nope"), str(tmp_path / "x"))
    model, _ = gpt2()
    model.save_pretrained(tmp_path / "hf")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("keep me")
    with pytest.raises(ConversionError, match="not empty"):
        convert(str(tmp_path / "hf"), str(tmp_path / "taken"))
    assert (tmp_path / "taken" / "file").read_text() == "keep me"
    from mwb.core.config import ModelConfig
    from mwb.core.convert import bert as bert_family
    from mwb.core.convert import _mwb_model_dict
    from mwb.core.config import RunConfig
    prenorm = _mwb_model_dict(RunConfig(model=ModelConfig(arch="bert")))
    with pytest.raises(ConversionError, match="pre-norm"):
        bert_family.check_mwb(prenorm)


def test_converted_checkpoint_trains_in_a_trainer(tmp_path):
    """A converted checkpoint is a starting point for training: ``checkpoint.load`` puts it into a trainer."""
    import dataclasses

    from mwb.core import checkpoint
    from mwb.core.training.batches import SyntheticTokens
    from mwb.core.training.model_spec import GPTSpec
    from mwb.core.training.trainer import Trainer

    model, _ = llama()
    model.eval().save_pretrained(tmp_path / "hf")
    _, out, _ = convert(str(tmp_path / "hf"), str(tmp_path / "mwb"))
    cfg, _, _ = load_full_model(out)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=1, micro_batch_size=2,
                                                             global_batch_size=2, seq_length=8))
    trainer = Trainer(cfg, GPTSpec(cfg, V), SyntheticTokens(V, 8, seed=1))
    assert checkpoint.load(trainer, out) == 0
    ids = torch.randint(0, V, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(mwb_logits(trainer.chunks[0].eval(), ids), hf_logits(model, ids), rtol=0,
                                   atol=1e-5)
    assert trainer.train_step().loss > 0
