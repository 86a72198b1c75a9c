"""Property-based tests of the Megatron / NeMo readers' metadata parsing: whatever a malformed
``latest_checkpointed_iteration.txt``, torch_dist ``metadata.json`` or ``common.pt``, ``.nemo``
``model_config.yaml``, ``args`` namespace or ``checkpoint_version`` holds, ``mwb convert`` either converts or stops with one line of the
project's own error types (exit 1 or 2) — never another exception — and writes nothing under DST.

One tiny legacy GPT checkpoint (from a random-weight ``GPT2LMHeadModel``, tests/helpers/megatron_legacy.py) is
written once; each example copies it and breaks one piece of metadata. ``convert`` is called directly (the
exception type is checked) and through the CLI (exit status, one stderr line, DST absent); what converts must
load (args that disagree with the weights are refused, not written).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwb.core.compose import load_full_model
from mwb.core.config import ConfigError
from mwb.core.convert import convert, mwb_to_megatron
from mwb.core.convert.megatron_legacy import flatten_tensors
from mwb.core.errors import MwbError
from tests.helpers.cli import run_cli
from tests.helpers.fuzz import FUZZ, folder
from tests.helpers.megatron_legacy import write_gpt2

V = 101
CLEAN = (MwbError, ConfigError)  # ConversionError, DataError, CheckpointError are MwbErrors
SETTINGS = settings(FUZZ, max_examples=15,
                    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture])

# A value of any JSON / YAML / pickle-friendly type: what a hand-edited or foreign file may hold.
anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=True),
                     st.text(max_size=12), st.lists(st.integers(-2, 5), max_size=3),
                     st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
# what the legacy reader takes from args (the architecture and the layout)
ARG_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "max_position_embeddings",
              "padded_vocab_size", "make_vocab_size_divisible_by", "tensor_model_parallel_size",
              "pipeline_model_parallel_size", "layernorm_epsilon", "hidden_dropout", "attention_dropout",
              "kv_channels", "num_query_groups", "group_query_attention", "position_embedding_type",
              "normalization", "swiglu", "rotary_base", "rotary_percent", "init_method_std", "openai_gelu",
              "untie_embeddings_and_output_weights", "vocab_file", "merge_file", "tokenizer_type",
              "virtual_pipeline_model_parallel_size")
NEEDED = ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(legacy save dir, unpacked NeMo 1 dir with its model_config.yaml as a dict)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=V, n_positions=16)).eval()
    root = tmp_path_factory.mktemp("fuzz")
    save = root / "save"
    d = write_gpt2(hf, str(save), iteration=500)
    with open(save / "gpt2-vocab.json", "w", encoding="utf-8") as f:
        json.dump({chr(33 + i): i for i in range(V)}, f)
    (save / "gpt2-merges.txt").write_text("#version: 0.2\n")
    nemo = root / "nemo"
    nemo.mkdir()
    model = torch.load(os.path.join(d, "mp_rank_00", "model_optim_rng.pt"), weights_only=False)["model"]
    torch.save(flatten_tensors({"language_model": model["language_model"]}, "model."), nemo / "model_weights.ckpt")
    cfg = {"num_layers": 2, "hidden_size": 16, "ffn_hidden_size": 64, "num_attention_heads": 2,
           "max_position_embeddings": 16, "normalization": "layernorm", "activation": "gelu", "bias": True,
           "layernorm_epsilon": 1e-5, "make_vocab_size_divisible_by": 8, "tensor_model_parallel_size": 1,
           "pipeline_model_parallel_size": 1, "mcore_gpt": False,
           "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer", "vocab_file": "vocab.json",
                         "merge_file": "merges.txt"}}
    shutil.copy(save / "gpt2-vocab.json", nemo / "vocab.json")
    shutil.copy(save / "gpt2-merges.txt", nemo / "merges.txt")
    (nemo / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    _converts(str(save), str(root / "ok-legacy"))  # the unbroken ones convert: a failure below is the fuzz's
    _converts(str(nemo), str(root / "ok-nemo"))
    dist = root / "dist"  # a torch_dist save (mwb's own writer: common.pt + DCP), for its common.pt
    mwb_to_megatron(str(root / "ok-legacy"), str(dist))
    _converts(str(dist), str(root / "ok-dist"))
    return save, nemo, cfg, dist


def _converts(src: str, dst: str) -> None:
    convert(src, dst)
    assert os.path.isfile(os.path.join(dst, "metadata.json"))


def _outcome(src: str, work: str, capsys, must_fail: bool) -> None:
    """``convert`` raises only CLEAN errors of one line, or converts; ``mwb convert`` agrees and writes
    nothing under DST when it fails."""
    failed = False
    try:
        convert(src, os.path.join(work, "api-out"))
    except CLEAN as e:
        failed = True
        assert str(e) and "\n" not in str(e).strip(), repr(str(e))
    assert failed or not must_fail, "a broken checkpoint was converted"
    if not failed:
        load_full_model(os.path.join(work, "api-out"))  # what it wrote loads: args and weights agreed
    dst = os.path.join(work, "cli-out")
    code, _, err = run_cli(["convert", src, dst], capsys)
    if failed:
        assert code in (1, 2) and len(err.strip().splitlines()) == 1, (code, err)
        assert not os.path.exists(dst)
        assert not os.path.exists(os.path.join(work, "api-out"))
    else:
        assert code == 0, err


def _copy(src, work: str) -> str:
    out = os.path.join(work, "src")
    shutil.copytree(src, out)
    return out


@SETTINGS
@given(data=st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode),
                      st.sampled_from([b"", b"\n", b"50", b"-1", b"\xb2", "\u0663".encode(), b"release\x00",
                                       b"iter_0000500", b"1e3", b"0x1f4"])))
def test_tracker_file_of_any_bytes(base, capsys, data):
    save = base[0]
    with folder() as work:
        src = _copy(save, work)
        with open(os.path.join(src, "latest_checkpointed_iteration.txt"), "wb") as f:
            f.write(data)
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = ""
        ok = text.isascii() and text.isdigit() and int(text) == 500  # the one iteration the save holds
        _outcome(src, work, capsys, must_fail=not ok)


@SETTINGS
@given(data=st.one_of(st.binary(max_size=60), anything.map(lambda v: json.dumps(v).encode()),
                      st.dictionaries(st.sampled_from(["sharded_backend", "sharded_backend_version",
                                                       "common_backend"]), anything, max_size=3)
                      .map(lambda v: json.dumps(v).encode()),
                      st.just(b'{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')))
def test_torch_dist_metadata_json_of_any_content(base, capsys, data):
    """A ``metadata.json`` in the checkpoint directory: either not torch_dist (the legacy shards are read,
    and convert) or torch_dist with no DCP files (refused)."""
    save = base[0]
    with folder() as work:
        src = _copy(save, work)
        with open(os.path.join(src, "iter_0000500", "metadata.json"), "wb") as f:
            f.write(data)
        _outcome(src, work, capsys, must_fail=False)


def _edited_args(args: argparse.Namespace, field: str, value, drop: bool) -> argparse.Namespace:
    """``args`` with ``field`` dropped, or set to ``value``."""
    out = vars(args).copy()
    if drop:
        out.pop(field, None)
    else:
        out[field] = value
    return argparse.Namespace(**out)


@SETTINGS
@given(field=st.sampled_from(ARG_FIELDS), value=anything, drop=st.booleans())
def test_args_missing_fields_or_wrong_types(base, capsys, field, value, drop):
    save = base[0]
    with folder() as work:
        src = _copy(save, work)
        shard = os.path.join(src, "iter_0000500", "mp_rank_00", "model_optim_rng.pt")
        ck = torch.load(shard, weights_only=False)
        ck["args"] = _edited_args(ck["args"], field, value, drop)
        torch.save(ck, shard)
        wrong_int = field in NEEDED and not (isinstance(value, int) and not isinstance(value, bool))
        _outcome(src, work, capsys, must_fail=(drop and field in NEEDED) or (not drop and wrong_int))


@SETTINGS
@given(version=st.one_of(anything, st.sampled_from([0.5, 1.5, 4.0, -1.0, "2.0", "x"])))
def test_unknown_checkpoint_version(base, capsys, version):
    save = base[0]
    with folder() as work:
        src = _copy(save, work)
        shard = os.path.join(src, "iter_0000500", "mp_rank_00", "model_optim_rng.pt")
        ck = torch.load(shard, weights_only=False)
        ck["checkpoint_version"] = version
        torch.save(ck, shard)
        # 0 and 1.0 are known too (another QKV order: converts, to other logits); a string or bool is refused
        known = isinstance(version, (int, float)) and not isinstance(version, bool) and version in (0, 1, 2, 3)
        _outcome(src, work, capsys, must_fail=not known)


@SETTINGS
@given(data=st.one_of(
    st.binary(max_size=60),
    st.just(b"num_layers: [unclosed\n"),
    st.tuples(st.sampled_from(["num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                               "max_position_embeddings", "layernorm_epsilon", "normalization", "activation",
                               "tensor_model_parallel_size", "pipeline_model_parallel_size", "tokenizer",
                               "num_query_groups", "kv_channels", "make_vocab_size_divisible_by",
                               "transformer_block_type", "rotary_percentage", "hidden_dropout"]),
              anything, st.booleans())))
def test_nemo_model_config_yaml_of_any_content(base, capsys, data):
    _, nemo, cfg, _ = base
    with folder() as work:
        src = _copy(nemo, work)
        if isinstance(data, bytes):
            text, must_fail = data, True
        else:
            field, value, drop = data
            c = dict(cfg)
            if drop:
                c.pop(field, None)
            else:
                c[field] = value
            text = yaml.safe_dump(c).encode()
            must_fail = drop and field in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                                           "max_position_embeddings")
        with open(os.path.join(src, "model_config.yaml"), "wb") as f:
            f.write(text)
        _outcome(src, work, capsys, must_fail=must_fail)


@SETTINGS
@given(data=st.one_of(st.binary(max_size=40), st.sampled_from([[], "args", None, 3]),
                      st.tuples(st.sampled_from(ARG_FIELDS), anything, st.booleans()),
                      st.tuples(st.just("checkpoint_version"), anything, st.just(False))))
def test_torch_dist_common_pt_of_any_content(base, capsys, data):
    dist = base[3]
    with folder() as work:
        src = _copy(dist, work)
        common = os.path.join(src, "release", "common.pt")
        must_fail = True
        if isinstance(data, bytes):
            with open(common, "wb") as f:
                f.write(data)
        elif not isinstance(data, tuple):
            torch.save(data, common)
        else:
            field, value, drop = data
            ck = torch.load(common, weights_only=False)
            if field == "checkpoint_version":
                ck[field] = value
                must_fail = not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and value in (0, 1, 2, 3))
            else:
                ck["args"] = _edited_args(ck["args"], field, value, drop)
                must_fail = field in NEEDED and (drop or not (isinstance(value, int) and not isinstance(value, bool)))
            torch.save(ck, common)
        _outcome(src, work, capsys, must_fail=must_fail)


@pytest.mark.parametrize("field,value", [("hidden_size", 8), ("ffn_hidden_size", 32), ("kv_channels", 4),
                                         ("max_position_embeddings", 8)])
def test_args_that_disagree_with_the_weights_are_refused(base, capsys, field, value):
    """Found by the fuzz: well-typed wrong sizes used to be written as a checkpoint no model loads."""
    save = base[0]
    with folder() as work:
        src = _copy(save, work)
        shard = os.path.join(src, "iter_0000500", "mp_rank_00", "model_optim_rng.pt")
        ck = torch.load(shard, weights_only=False)
        setattr(ck["args"], field, value)
        torch.save(ck, shard)
        code, _, err = run_cli(["convert", src, os.path.join(work, "out")], capsys)
        assert code == 1 and "args and weights disagree" in err and len(err.strip().splitlines()) == 1, err
        assert not os.path.exists(os.path.join(work, "out"))
