"""NeMo checkpoints → mwb: logits equal the reference model's.

The ``.nemo`` archives are built by tests/helpers/nemo_ckpt.py with tarfile from checkpoints the Megatron test helpers write: a
legacy-key GPT (tests/helpers/megatron_legacy.py, from a Hugging Face GPT-2) and megatron-core GPTs
(tests/helpers/megatron_core_ref.py, megatron-core's own GPTModel; ``mcore_gpt`` keys, TP 1 and TP 2
``mp_rank_0X/`` shards). NeMo's ``model.`` key prefix and ``nemo:`` tokenizer references are as NeMo's
``SaveRestoreConnector`` writes them.
"""
from __future__ import annotations

import glob
import os

import pytest
import torch

from mwb.core.compose import load_full_model
from mwb.core.convert import ConversionError, convert, nemo_to_mwb
from tests.helpers.cli import run_cli
from tests.helpers.megatron_core_ref import run_reference, tiny_specs
from tests.helpers.needs import needs
from tests.helpers.nemo_ckpt import bert_nemo, legacy_nemo as _legacy_nemo, mcore_cfg as _mcore_cfg, nemo2_dir as _nemo2_dir
from tests.helpers.nemo_ckpt import nemo_tar as _nemo, redcp as _redcp, vocab_files as _vocab_files

V = 101


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("tp,gz", [(1, False), (2, True)])
def test_legacy_key_nemo_logits_match_gpt2(gpt2, tmp_path, tp, gz):
    src = _legacy_nemo(gpt2, tmp_path, tp=tp, gz=gz)
    direction, out, family = convert(src, str(tmp_path / "mwb"))
    assert (direction, family) == ("nemo-to-mwb", "nemo-gpt")
    cfg, model, _ = load_full_model(out)
    assert cfg.model.vocab_size == V
    assert sorted(os.listdir(os.path.join(out, "tokenizer"))) == ["merges.txt", "vocab.json"]
    x = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, ref = model(x), gpt2(x).logits
    assert (got[..., :V] - ref).abs().max().item() < 1e-5  # the model pads its logits, as for Megatron


@pytest.mark.parametrize("case,words", [("weights", "holds no weights"), ("hidden_size", "'hidden_size'"),
                                        ("tokenizer", "200 tokens"), ("shard", "mp_rank_01/model_weights.ckpt")])
def test_bad_nemo_fails_in_one_line_writing_nothing(gpt2, tmp_path, capsys, case, words):
    src = _legacy_nemo(gpt2, tmp_path, tp=2 if case == "shard" else 1, drop="" if case == "tokenizer" else case,
                       tok_n=200 if case == "tokenizer" else V)
    dst = tmp_path / "out"
    with pytest.raises(ConversionError, match=words):
        convert(src, str(dst))
    code, out, err = run_cli(["convert", src, str(dst)], capsys)
    assert code == 1 and words in err and len(err.strip().splitlines()) == 1
    assert not dst.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".out")]


SPECS = tiny_specs(V, 104, (5, 6), llama_groups=2)


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    d = tmp_path_factory.mktemp("nemo-mcore")
    specs = {n: {**s, "save_dist": str(d / n)} for n, s in SPECS.items()}
    ref = run_reference(specs, d)
    for n in SPECS:
        ref[n]["dist"] = str(d / n / "release")
    return ref


def _check(out: str, ref: dict) -> None:
    cfg, model, _ = load_full_model(out)
    assert cfg.model.vocab_size == V
    with torch.no_grad():
        got = model(ref["tokens"])
    assert (got[..., :V] - ref["logits"][..., :V]).abs().max().item() < 1e-5


@needs("megatron.core")
@pytest.mark.parametrize("name,tp", [("gpt2like", 1), ("gpt2like", 2), ("llamalike", 2)])
def test_mcore_nemo_logits_match_megatron_core(refs, tmp_path, name, tp):
    from tests.helpers.megatron_core_ckpt import write_core_torch
    spec, ref = SPECS[name], refs[name]
    d = write_core_torch(ref, spec, str(tmp_path / "mlm"), tp=tp)
    shards = {}
    for t in range(tp):
        model = torch.load(os.path.join(d, f"mp_rank_{t:02d}", "model_optim_rng.pt"), weights_only=False)["model"]
        shards["model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"] = \
            {"model." + k: v for k, v in model.items()}
    src = _nemo(str(tmp_path / "m.nemo"), _mcore_cfg(spec, tp), shards, _vocab_files())
    _, out, family = convert(src, str(tmp_path / "mwb"))
    assert family == "nemo-gpt"
    _check(out, ref)


@needs("megatron.core")
def test_nemo2_directory_logits_match_megatron_core(refs, tmp_path):
    root = _nemo2_dir(refs["llamalike"], SPECS["llamalike"], tmp_path / "nemo2")
    _, out, family = convert(root, str(tmp_path / "mwb"))
    assert family == "nemo-gpt" and glob.glob(os.path.join(out, "tokenizer", "vocab.json"))
    _check(out, refs["llamalike"])


def _counting_converter(monkeypatch) -> list:
    """Count the conversions ``--checkpoint`` runs (the cached-model path calls ``named_models.nemo_to_mwb``)."""
    from mwb.core import named_models
    calls = []

    def counted(src, dst, overwrite=False):
        calls.append(src)
        return nemo_to_mwb(src, dst, overwrite)
    monkeypatch.setattr(named_models, "nemo_to_mwb", counted)
    return calls


def test_checkpoint_flag_converts_a_nemo_file_once_into_cache(gpt2, tmp_path, monkeypatch):
    from mwb.core.named_models import local_checkpoint
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    calls = _counting_converter(monkeypatch)
    src = _legacy_nemo(gpt2, tmp_path, tp=2, gz=True)
    first = local_checkpoint(src)
    assert first.startswith(str(tmp_path / "cache")) and len(calls) == 1
    assert local_checkpoint(src) == first and len(calls) == 1  # the second use reads the cache
    _, model, _ = load_full_model(src)  # what every --checkpoint goes through
    x = torch.randint(0, V, (1, 6), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        got, ref = model(x), gpt2(x).logits
    assert len(calls) == 1 and (got[..., :V] - ref).abs().max().item() < 1e-5


@needs("megatron.core")
def test_checkpoint_flag_converts_a_nemo2_directory_once_into_cache(refs, tmp_path, monkeypatch):
    from mwb.core.named_models import local_checkpoint
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    calls = _counting_converter(monkeypatch)
    root = _nemo2_dir(refs["llamalike"], SPECS["llamalike"], tmp_path / "nemo2")
    first = local_checkpoint(root)
    assert first.startswith(str(tmp_path / "cache")) and local_checkpoint(root) == first and len(calls) == 1
    _check(root, refs["llamalike"])  # load_full_model(root) reads the cached conversion
    assert len(calls) == 1


def test_mwb_convert_of_a_nemo_file_still_writes_an_mwb_checkpoint(gpt2, tmp_path, capsys, monkeypatch):
    """``mwb convert X.nemo DST`` converts X itself (not its cached copy exported onwards to Hugging Face)."""
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    src = _legacy_nemo(gpt2, tmp_path)
    code, out, err = run_cli(["convert", src, str(tmp_path / "mwb")], capsys)
    assert code == 0 and "mwb checkpoint" in out and (tmp_path / "mwb" / "metadata.json").exists()


@needs("megatron.core")
def test_nemo_with_dist_model_weights_logits_match_megatron_core(refs, tmp_path):
    """A .nemo whose weights are a ``model_weights/`` distributed checkpoint (keys ``model.decoder.…``)."""
    spec, ref = SPECS["gpt2like"], refs["gpt2like"]
    _redcp(ref["dist"], str(tmp_path / "w"), "model.")
    extra = {f"model_weights/{n}": (tmp_path / "w" / n).read_bytes() for n in os.listdir(tmp_path / "w")}
    src = _nemo(str(tmp_path / "d.nemo"), _mcore_cfg(spec, 2), {}, {**_vocab_files(), **extra})
    _, out, _ = convert(src, str(tmp_path / "mwb"))
    _check(out, ref)


@pytest.fixture(scope="module")
def megatron_bert():
    from transformers import MegatronBertConfig, MegatronBertForPreTraining
    torch.manual_seed(2)
    cfg = MegatronBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, layer_norm_eps=1e-5, max_position_embeddings=64)
    return MegatronBertForPreTraining(cfg).eval()


@pytest.mark.parametrize("tp,prefix,new_names", [(1, "model.", True), (2, "model.", True),
                                                 (2, "bert_model.", False)])
def test_bert_nemo_logits_match_megatron_bert(megatron_bert, tmp_path, tp, prefix, new_names):
    """A NeMo 1 BERT archive (BioMegatron layout) → mwb: MLM and binary logits equal transformers'
    ``MegatronBertForPreTraining`` with the same weights; the WordPiece vocab travels, lower-cased as the config says."""
    src = bert_nemo(megatron_bert, tmp_path, tp=tp, prefix=prefix, new_names=new_names)
    _, out, family = convert(src, str(tmp_path / "mwb"))
    assert family == "nemo-bert"
    cfg, model, tok = load_full_model(out)
    assert cfg.model.vocab_size == V and cfg.model.num_tokentypes == 2 and cfg.model.bert_binary_head
    from mwb.core.tokenizers.loader import load_tokenizer
    t = load_tokenizer(tok)
    assert t.vocab_size == V and t.lowercase is True
    x = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(4))
    types = torch.randint(0, 2, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = megatron_bert(input_ids=x, token_type_ids=types)
        lm, binary = model(x, types=types)
    assert (lm[..., :V] - ref.prediction_logits).abs().max().item() < 1e-5
    assert (binary - ref.seq_relationship_logits).abs().max().item() < 1e-5


def test_bert_nemo_without_weights_fails_in_one_line_writing_nothing(megatron_bert, tmp_path, capsys):
    src = bert_nemo(megatron_bert, tmp_path, drop="weights")
    dst = tmp_path / "out"
    code, out, err = run_cli(["convert", src, str(dst)], capsys)
    assert code == 1 and "holds no weights" in err and len(err.strip().splitlines()) == 1
    assert not dst.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".out")]
