"""NeMo checkpoints → mwb: logits equal the reference model's.

The ``.nemo`` archives are built here with tarfile from checkpoints the Megatron test helpers write: a
legacy-key GPT (tests/helpers/megatron_legacy.py, from a Hugging Face GPT-2) and megatron-core GPTs
(tests/helpers/megatron_core_ref.py, megatron-core's own GPTModel; ``mcore_gpt`` keys, TP 1 and TP 2
``mp_rank_0X/`` shards). NeMo's ``model.`` key prefix and ``nemo:`` tokenizer references are as NeMo's
``SaveRestoreConnector`` writes them.
"""
from __future__ import annotations

import glob
import io
import json
import os
import tarfile

import pytest
import torch
import yaml

from mwb.core.compose import load_full_model
from mwb.core.convert import ConversionError, convert, nemo_to_mwb
from mwb.core.convert.megatron_legacy import flatten_tensors
from tests.helpers.cli import run_cli
from tests.helpers.megatron_legacy import write_gpt2
from tests.helpers.megatron_core_ref import run_reference, tiny_specs
from tests.helpers.needs import needs

V = 101


def _vocab_files(n: int = V) -> dict:
    return {"abc123_vocab.json": json.dumps({chr(33 + i): i for i in range(n)}).encode(),
            "def456_merges.txt": b"#version: 0.2\n"}


def _nemo(path: str, config: dict, shards: dict, extra: dict | None = None, gz: bool = False) -> str:
    """A .nemo tar: ``./model_config.yaml``, ``shards`` {member: state dict}, ``extra`` {member: bytes}."""
    files = {"model_config.yaml": yaml.safe_dump(config).encode(), **(extra or {})}
    for name, sd in shards.items():
        buf = io.BytesIO()
        torch.save(sd, buf)
        files[name] = buf.getvalue()
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _tok_cfg() -> dict:
    return {"library": "megatron", "type": "GPT2BPETokenizer", "model": None,
            "vocab_file": "nemo:abc123_vocab.json", "merge_file": "nemo:def456_merges.txt"}


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def _legacy_nemo(gpt2, tmp_path, tp: int = 1, drop: str = "", tok_n: int = V, gz: bool = False) -> str:
    """A NeMo 1 .nemo of ``gpt2`` with legacy Megatron keys (``model.language_model.…``)."""
    d = write_gpt2(gpt2, str(tmp_path / "mlm"), tp=tp, version=2.0, new_names=True)
    shards = {}
    for t in range(tp):
        model = torch.load(os.path.join(d, f"mp_rank_{t:02d}", "model_optim_rng.pt"), weights_only=False)["model"]
        name = "model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"
        shards[name] = flatten_tensors({"language_model": model["language_model"]}, "model.")
    c = gpt2.config
    cfg = {"num_layers": c.n_layer, "hidden_size": c.n_embd, "ffn_hidden_size": 4 * c.n_embd,
           "num_attention_heads": c.n_head, "max_position_embeddings": c.n_positions,
           "position_embedding_type": "learned_absolute", "normalization": "layernorm", "activation": "gelu",
           "bias": True, "bias_activation_fusion": True, "share_embeddings_and_output_weights": True,
           "layernorm_epsilon": c.layer_norm_epsilon, "make_vocab_size_divisible_by": 8,
           "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1, "mcore_gpt": False,
           "tokenizer": _tok_cfg()}
    if drop == "weights":
        shards = {}
    elif drop == "shard":
        shards.pop("mp_rank_01/model_weights.ckpt")
    elif drop:
        cfg.pop(drop)
    return _nemo(str(tmp_path / "model.nemo"), cfg, shards, _vocab_files(tok_n), gz=gz)


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


def _mcore_cfg(s: dict, tp: int) -> dict:
    return {"mcore_gpt": True, "num_layers": s["num_layers"], "hidden_size": s["hidden_size"],
            "ffn_hidden_size": s["ffn"], "num_attention_heads": s["heads"], "num_query_groups": s["groups"],
            "max_position_embeddings": s["max_pos"], "position_embedding_type": s["pos"],
            "normalization": s["norm"].lower(), "activation": "fast-swiglu" if s["swiglu"] else "gelu",
            "bias": s["bias"], "bias_activation_fusion": False, "share_embeddings_and_output_weights": s["tied"],
            "layernorm_epsilon": 1e-5, "make_vocab_size_divisible_by": 8, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": 1, "tokenizer": _tok_cfg()}


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


def _redcp(src_dir: str, dst_dir: str, prefix: str) -> None:
    """megatron-core's torch_dist checkpoint ``src_dir`` saved again with ``prefix`` on every model key."""
    import torch.distributed.checkpoint as dcp
    from mwb.core.convert.megatron_dist import load_tensors
    tensors = {prefix + k: v for k, v in load_tensors(src_dir).items()}
    dcp.save(tensors, storage_writer=dcp.FileSystemWriter(dst_dir), no_dist=True)
    with open(os.path.join(dst_dir, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1}, f)


def _nemo2_dir(ref: dict, spec: dict, root) -> str:
    """A NeMo 2 directory (``context/model.yaml``, ``context/nemo_tokenizer/``, ``weights/``) of ``ref``."""
    _redcp(ref["dist"], str(root / "weights"), "module.")
    tok = root / "context" / "nemo_tokenizer"
    tok.mkdir(parents=True)
    for name, data in _vocab_files().items():
        (tok / name.split("_", 1)[1]).write_bytes(data)
    config = {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaConfig", "num_layers": spec["num_layers"],
              "hidden_size": spec["hidden_size"], "ffn_hidden_size": spec["ffn"],
              "num_attention_heads": spec["heads"], "num_query_groups": spec["groups"], "seq_length": spec["max_pos"],
              "position_embedding_type": "rope", "normalization": "RMSNorm", "gated_linear_unit": True,
              "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
              "add_bias_linear": False, "share_embeddings_and_output_weights": False, "layernorm_epsilon": 1e-5,
              "make_vocab_size_divisible_by": 8}
    (root / "context" / "model.yaml").write_text(yaml.safe_dump(
        {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaModel", "config": config}))
    return str(root)


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
