"""NeMo 1 ``MegatronT5Model`` archives → mwb T5: its logits equal megatron-core's ``T5Model``'s with the same weights.

The reference is megatron-core 0.16's ``T5Model`` (local spec with final layernorms, tied head with a randomised
vocab bias) built on CPU by tests/helpers/megatron_core_ref.py. Its weights go into ``.nemo`` archives under
NeMo's own key names (from NeMo's ``token_level_encoder_decoder.py`` and ``transformer.py``: ``enc_dec_model.``
+ ``encoder_embedding`` / ``decoder_embedding`` / ``enc_dec_model.{encoder,decoder}.model.…`` / ``tokens_head.bias``;
with ``mcore_t5`` megatron-core's names under ``enc_dec_model.``), at TP 1 and 2, then ``mwb convert`` reads them.
"""
from __future__ import annotations

import pytest

from mwb.core.convert import ConversionError, convert
from mwb.core.convert.megatron_legacy import flatten_tensors
from tests.helpers.megatron_core_ckpt import _tp_piece
from tests.helpers.megatron_core_ref import run_reference, t5_spec
from tests.helpers.megatron_legacy_t5 import converted_t5_delta, legacy_t5_model
from tests.helpers.needs import needs
from tests.helpers.nemo_ckpt import nemo_tar

pytestmark = needs("megatron.core")

V = 61
SPEC = t5_spec(V, 64, 17, True, True)
VOCAB = ("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]) + "\n").encode()


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return run_reference({"t5": SPEC}, tmp_path_factory.mktemp("nemo-t5"))["t5"]


def _nemo_names(model: dict) -> dict:
    """A legacy Megatron T5 ``model`` tree → NeMo's MegatronT5Model state dict keys (both embeddings, shared)."""
    out = {}
    for k, v in flatten_tensors(model).items():
        if k.startswith("language_model.embedding."):
            tail = k[len("language_model.embedding."):]
            out[f"enc_dec_model.encoder_embedding.{tail}"] = v
            out[f"enc_dec_model.decoder_embedding.{tail}"] = v
        elif k.startswith(("language_model.encoder.", "language_model.decoder.")):
            side, tail = k.split(".", 2)[1:]
            out[f"enc_dec_model.enc_dec_model.{side}.model.{tail}"] = v
        else:
            assert k == "lm_head.bias", k
            out["enc_dec_model.tokens_head.bias"] = v
    return out


def _config(tp: int, mcore: bool, legacy: bool, **top) -> dict:
    side = {"num_layers": SPEC["num_layers"], "hidden_size": SPEC["hidden_size"], "ffn_hidden_size": SPEC["ffn"],
            "num_attention_heads": SPEC["heads"], "kv_channels": None, "position_embedding_type": "learned_absolute",
            "normalization": "layernorm", "activation": "gelu", "bias": True, "bias_activation_fusion": False,
            "layernorm_epsilon": 1e-5, "transformer_block_type": "pre_ln", "megatron_legacy": legacy,
            "headscale": False, "normalize_attention_scores": True, "arch": "transformer", "num_moe_experts": 1,
            "openai_gelu": False}
    return {"mcore_t5": mcore, "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1,
            "max_position_embeddings": SPEC["max_pos"], "make_vocab_size_divisible_by": 8,
            "share_token_embeddings": True, "share_decoder_tokens_head_embeddings": True, "tokens_head_bias": True,
            "tokenizer": {"library": "megatron", "type": "BertWordPieceLowerCase", "model": None,
                          "vocab_file": "nemo:a1b2_vocab.txt", "merge_file": None},
            "encoder": side, "decoder": dict(side), **top}


def _archive(r: dict, tmp_path, tp: int, mcore: bool = False, legacy: bool = False, rows_legacy=None, **top) -> str:
    """``rows_legacy``: the QKV row order written (default: what ``legacy`` says)."""
    rows_legacy = legacy if rows_legacy is None else rows_legacy
    shards = {}
    for t in range(tp):
        if mcore:
            sd = {f"enc_dec_model.{k}": _tp_piece(k, v, t, tp, False) for k, v in r["state"].items()}
        else:
            sd = _nemo_names(legacy_t5_model(r["state"], SPEC, t, tp, 0.0 if rows_legacy else 2.0))
        shards["model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"] = {"state_dict": sd}
    return nemo_tar(str(tmp_path / "t5.nemo"), _config(tp, mcore, legacy, **top), shards, {"a1b2_vocab.txt": VOCAB})


def _delta(r: dict, tmp_path, **kw) -> float:
    _, out, family = convert(_archive(r, tmp_path, **kw), str(tmp_path / "mwb"))
    assert family == "nemo-t5"
    return converted_t5_delta(out, r, V, kw)


@pytest.mark.parametrize("mcore,legacy", [(False, False), (False, True), (True, False)],
                         ids=["nemo-names", "nemo-names-megatron_legacy", "mcore_t5"])
@pytest.mark.parametrize("tp", [1, 2])
def test_nemo_t5_logits_match_megatron_core(ref, tmp_path, tp, mcore, legacy):
    assert ref["state"]["lm_head.output_layer.bias"].abs().max() > 0.05  # the head bias is really exercised
    assert _delta(ref, tmp_path, tp=tp, mcore=mcore, legacy=legacy) < 1e-5


def test_nemo_t5_megatron_legacy_flag_decides_the_qkv_rows(ref, tmp_path):
    """The comparison can fail: ``[np, 3, hn]`` rows read as ``megatron_legacy``'s ``[3, np, hn]`` change the logits."""
    assert _delta(ref, tmp_path, tp=2, legacy=True, rows_legacy=False) > 1e-3


@pytest.mark.parametrize("top,words", [({"share_decoder_tokens_head_embeddings": False},
                                        "share_decoder_tokens_head_embeddings"),
                                       ({"pipeline_model_parallel_size": 2}, "pipeline_model_parallel_size")])
def test_nemo_t5_refusals_are_one_line(ref, tmp_path, top, words):
    with pytest.raises(ConversionError) as e:
        convert(_archive(ref, tmp_path, tp=1, **top), str(tmp_path / "mwb"))
    assert words in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "mwb").exists()
