"""NeMo 1 ``MegatronT5Model`` archives (``.nemo``) → mwb T5, through the Megatron T5 readers.

Why this works by renaming: NeMo's non-mcore T5 (``MegatronTokenLevelEncoderDecoderModule`` in
``nemo/collections/nlp/modules/common/megatron/token_level_encoder_decoder.py``) builds its stacks from NeMo's
``ParallelTransformer`` (``modules/common/megatron/transformer.py``), whose ``pre_ln`` layers carry Megatron-LM's
legacy names in Megatron-LM's legacy order (``input_layernorm`` → ``self_attention`` →
``post_attention_layernorm`` → ``inter_attention`` → ``post_inter_attention_layernorm`` → ``mlp``, and a
``final_layernorm``), so a shard is renamed to the legacy layout and read by :mod:`.megatron_legacy_t5`.
``mcore_t5: true`` models (``megatron_lm_encoder_decoder_model.py``: ``self.enc_dec_model`` is megatron-core's
``T5Model``) already hold megatron-core names and go to :mod:`.megatron_t5`.

Keys, as the model's attribute paths give them (``MegatronLMEncoderDecoderModel.enc_dec_model``, then
``encoder_embedding`` / ``decoder_embedding`` (the same module when ``share_token_embeddings``),
``enc_dec_model.encoder.model.*`` / ``enc_dec_model.decoder.model.*``, ``tokens_head.bias``): all under
``enc_dec_model.``. QKV rows are ``[np, 3, hn]`` and the cross K/V ``[np, 2, hn]`` (``attention.py``), except
with ``megatron_legacy: true`` (models converted from Hugging Face), whose ``_transpose_last_dim(…, True)`` means
rows ``[3, np, hn]``: Megatron's ``checkpoint_version`` 0.

The config (``megatron_t5_config.yaml``): the architecture under ``encoder:`` and ``decoder:``
(``megatron_model_base_config.yaml``'s fields), the rest at the top. What mwb's T5 cannot express (an untied or
unshared embedding, relative positions, headscale, unnormalised attention scores, experts, perceivers,
pipeline stages, a distributed checkpoint) is refused in one line.
"""
from __future__ import annotations

import os

from . import megatron_legacy, megatron_legacy_t5, megatron_t5, nemo
from .hf_io import ConversionError

PREFIX = "enc_dec_model."
# the fields the encoder and decoder must share for mwb's one-config T5
_SHARED = ("hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "activation", "normalization",
           "bias", "layernorm_epsilon", "position_embedding_type", "megatron_legacy", "bias_activation_fusion",
           "openai_gelu")


def is_t5(cfg: dict) -> bool:
    """Whether a ``model_config.yaml`` is an encoder-decoder's (``encoder:`` and ``decoder:`` sections)."""
    return isinstance(cfg.get("encoder"), dict) and isinstance(cfg.get("decoder"), dict)


def _check(cfg: dict, enc: dict, dec: dict, where: str) -> None:
    for f in _SHARED:
        if enc.get(f) != dec.get(f):
            raise ConversionError(f"{where}: encoder and decoder differ in {f} ({enc.get(f)!r:.30} vs "
                                  f"{dec.get(f)!r:.30}), which mwb's T5 has one of")
    bad = [("share_token_embeddings", cfg.get("share_token_embeddings", True) is False),
           ("share_decoder_tokens_head_embeddings", cfg.get("share_decoder_tokens_head_embeddings", True) is False),
           ("headscale", any(s.get("headscale") for s in (enc, dec))),
           ("normalize_attention_scores", any(s.get("normalize_attention_scores", True) is False for s in (enc, dec))),
           ("arch", any(s.get("arch", "transformer") != "transformer" for s in (enc, dec))),
           ("num_moe_experts", any((s.get("num_moe_experts") or 1) > 1 for s in (enc, dec))),
           ("pipeline_model_parallel_size", (cfg.get("pipeline_model_parallel_size") or 1) > 1)]
    for name, hit in bad:
        if hit:
            raise ConversionError(f"{where}: a NeMo T5 with this {name} setting is not supported (mwb's T5: shared, "
                                  f"tied embeddings, plain attention, one pipeline stage)")


def args_of(cfg: dict, where: str):
    """The Megatron ``args`` of a NeMo T5 config, and the QKV row version its weights use."""
    enc, dec = cfg["encoder"], cfg["decoder"]
    _check(cfg, enc, dec, where)
    args = nemo.nemo1_args({**cfg, **enc, "num_moe_experts": None}, where)
    args.encoder_num_layers, args.decoder_num_layers = enc.get("num_layers"), dec.get("num_layers")
    if cfg.get("mcore_t5"):
        return args, 3.0
    return args, 0.0 if enc.get("megatron_legacy") else 2.0


def _legacy_model(flat: dict, where: str) -> dict:
    """NeMo's non-mcore T5 names → Megatron-LM's legacy T5 ``model`` tree (:mod:`.megatron_legacy_t5`)."""
    tree: dict = {}
    emb = {}
    for k, v in flat.items():
        if k.startswith("encoder_embedding."):
            emb[k[len("encoder_embedding."):]] = v
        elif k.startswith("decoder_embedding."):
            continue  # shared with the encoder's (share_token_embeddings, checked)
        elif k.startswith(("enc_dec_model.encoder.model.", "enc_dec_model.decoder.model.")):
            side, rest = k.split(".")[1], k.split(".", 3)[3]
            tree[f"language_model.{side}.{rest}"] = v
        elif k == "tokens_head.bias":
            tree["lm_head.bias"] = v
        else:
            raise ConversionError(f"{where}: unexpected NeMo T5 tensor '{PREFIX}{k}'")
    for k, v in emb.items():
        tree[f"language_model.embedding.{k}"] = v
    return nemo._nest(tree)


def _shard(file: str, args, version: float, mcore: bool) -> dict:
    ck = megatron_legacy._load(file)
    sd = ck.get("state_dict", ck) if isinstance(ck, dict) else None
    if not isinstance(sd, dict):
        raise ConversionError(f"{file} holds no state dict")
    flat = {}
    for k, v in sd.items():
        if not (isinstance(k, str) and k.startswith(PREFIX)):
            raise ConversionError(f"{file}: unexpected tensor '{k}' (NeMo T5 keys start with {PREFIX})")
        flat[k[len(PREFIX):]] = v
    if mcore:
        return megatron_legacy.core_tensors(flat, file)
    return megatron_legacy_t5.core_tensors({"model": _legacy_model(flat, file), "args": args,
                                            "checkpoint_version": version}, file)


def read(src: str, root: str, tmp: str, cfg: dict) -> tuple:
    """(model config, vocab size, tensors, tokenizer files) of an unpacked NeMo T5 archive ``root``."""
    args, version = args_of(cfg, src)
    if os.path.isdir(os.path.join(root, "model_weights")):
        raise ConversionError(f"{src}: NeMo T5 distributed checkpoints (model_weights/) are not supported")
    tp = args.tensor_model_parallel_size
    stages = [[_shard(nemo._shard_file(root, t, 0, tp, 1), args, version, bool(cfg.get("mcore_t5")))
               for t in range(tp)]]
    if not megatron_t5.is_t5(stages[0][0]):
        raise ConversionError(f"{src}: the NeMo T5 weights hold no decoder cross-attention")
    paths, size = nemo._stage(*nemo.find_tokenizer(root, cfg.get("tokenizer") or {}), tmp)
    m, vocab, tensors, _ = megatron_legacy.assemble(args, version, stages, src, size)
    return m, vocab, tensors, paths
