"""Megatron-LM legacy checkpoints → mwb: logits equal the reference model's, at every checkpoint_version and
TP/PP layout, and bad checkpoints fail with one line, writing nothing.

The checkpoints are written by tests/helpers/megatron_legacy.py from Hugging Face models with random weights
(GPT2LMHeadModel, MegatronBertForPreTraining: Megatron's own pre-norm BERT), in the legacy key names and QKV
row orders; the reference logits are those models' own.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import ConversionError, convert
from tests.helpers.cli import run_cli
from tests.helpers.megatron_legacy import write_bert, write_gpt2

V = 101


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="module")
def bert():
    from transformers import MegatronBertConfig, MegatronBertForPreTraining
    torch.manual_seed(1)
    cfg = MegatronBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, layer_norm_eps=1e-5, max_position_embeddings=64)
    return MegatronBertForPreTraining(cfg).eval()


def _gpt2_vocab(d: str, n: int = V) -> None:
    """A GPT-2 style vocabulary of ``n`` tokens (byte-level symbols) beside the checkpoint."""
    syms = [chr(33 + i) for i in range(n)]
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({s: i for i, s in enumerate(syms)}, f)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


def _bert_vocab(d: str, n: int = V, name: str = "vocab.txt") -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"Word{i}" for i in range(n - 5)]
    with open(os.path.join(d, name), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")


def _gpt_logits(path: str, x: torch.Tensor) -> torch.Tensor:
    _, model, _ = load_full_model(path)
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize("version,tp,pp,new_names", [(0, 1, 1, False), (1.0, 2, 1, False), (2.0, 4, 1, False),
                                                     (3.0, 2, 2, True), (1.0, 1, 2, True)])
def test_gpt_logits_match_reference(gpt2, tmp_path, version, tp, pp, new_names):
    save = tmp_path / "save"
    write_gpt2(gpt2, str(save), tp=tp, pp=pp, version=version, new_names=new_names,
               iteration="release" if tp != 2 else 1200)
    _gpt2_vocab(str(save))
    direction, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert (direction, family) == ("megatron-to-mwb", "megatron-gpt")
    meta = json.loads((tmp_path / "mwb" / "metadata.json").read_text())
    assert meta["vocab_size"] == V  # the tokenizer's size, not the padded embedding's
    assert meta["config"]["model"]["activation"] == "gelu_tanh"  # bias_gelu_fusion: tanh gelu
    x = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = gpt2(x).logits
    got = _gpt_logits(out, x)
    assert (got[..., :V] - ref).abs().max().item() < 1e-5


def test_wrong_qkv_order_changes_logits(gpt2, tmp_path):
    """The QKV order matters (the equality above could not hold by accident): a version-0 checkpoint
    relabelled 2.0 gives other logits."""
    save = tmp_path / "save"
    d = write_gpt2(gpt2, str(save), tp=2, version=0)
    for f in ("mp_rank_00", "mp_rank_01"):
        p = os.path.join(d, f, "model_optim_rng.pt")
        ck = torch.load(p, weights_only=False)
        ck["checkpoint_version"] = 2.0
        torch.save(ck, p)
    convert(str(save), str(tmp_path / "mwb"))
    x = torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = gpt2(x).logits
    assert (_gpt_logits(str(tmp_path / "mwb"), x)[..., :V] - ref).abs().max().item() > 1e-2


@pytest.mark.parametrize("tp,pp,lower", [(2, 2, True), (4, 1, False)])
def test_bert_logits_match_megatron_bert(bert, tmp_path, tp, pp, lower):
    save = tmp_path / "save"
    write_bert(bert, str(save), tp=tp, pp=pp, version=1.0 if tp == 2 else 3.0, new_names=tp == 4,
               lower_case=lower)
    _bert_vocab(str(save), name="bert-vocab.txt")  # found under args.vocab_file's name
    _, out, family = convert(str(save), str(tmp_path / "mwb"))
    assert family == "megatron-bert"
    cfg, model, tok = load_full_model(out)
    assert cfg.model.vocab_size == V and cfg.model.arch == "bert" and not cfg.model.bert_post_norm
    from mwb.core.tokenizers.loader import load_tokenizer
    t = load_tokenizer(tok)
    assert t.vocab_size == V and t.lowercase is lower  # lower-casing from args.tokenizer_type, not the vocab
    x = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(4))
    types = torch.randint(0, 2, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = bert(input_ids=x, token_type_ids=types)
        lm, binary = model(x, types=types)
    assert (lm[..., :V] - ref.prediction_logits).abs().max().item() < 1e-5
    assert (binary - ref.seq_relationship_logits).abs().max().item() < 1e-5


def test_checkpoint_flag_converts_once_into_cache(gpt2, tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    save = tmp_path / "save"
    write_gpt2(gpt2, str(save), tp=2)
    from mwb.core.named_models import local_checkpoint
    first = local_checkpoint(str(save))
    assert first.startswith(str(tmp_path / "cache")) and local_checkpoint(str(save)) == first
    x = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ref = gpt2(x).logits
    assert (_gpt_logits(str(save), x)[..., :V] - ref).abs().max().item() < 1e-5  # no tokenizer: padded vocab kept


def _corrupt(case: str, gpt2, save: str) -> None:
    if case == "missing shard":
        d = write_gpt2(gpt2, save, tp=2, pp=2)
        os.remove(os.path.join(d, "mp_rank_01_001", "model_optim_rng.pt"))
    elif case == "unknown version":
        d = write_gpt2(gpt2, save, version=4.5)
    elif case == "args lack a field":
        d = write_gpt2(gpt2, save, args_extra={"num_attention_heads": None})
    else:  # a tokenizer larger than the embedding
        write_gpt2(gpt2, save)
        _gpt2_vocab(save, n=200)


@pytest.mark.parametrize("case,words", [("missing shard", "mp_rank_01_001"), ("unknown version", "4.5"),
                                        ("args lack a field", "num_attention_heads"),
                                        ("tokenizer too large", "200 tokens")])
def test_bad_checkpoints_fail_in_one_line_writing_nothing(gpt2, tmp_path, capsys, case, words):
    save, dst = tmp_path / "save", tmp_path / "out"
    _corrupt(case, gpt2, str(save))
    with pytest.raises(ConversionError, match=words.replace(".", r"\.")):
        convert(str(save), str(dst))
    code, out, err = run_cli(["convert", str(save), str(dst)], capsys)
    assert code == 1 and words in err and len(err.strip().splitlines()) == 1
    assert not dst.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".out")]
