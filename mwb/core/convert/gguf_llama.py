"""GGUF (llama.cpp) Llama-family files → mwb checkpoints, dequantised to float.

Why through the Hugging Face Llama mapping: a GGUF file holds the same tensors as a Hugging Face Llama
model under llama.cpp's names, so this module only renames them (``blk.N.attn_q`` → ``model.layers.N.
self_attn.q_proj``), builds the equivalent ``config.json`` from the ``llama.*`` metadata, and hands both to
:mod:`.llama`, which already knows mwb's names and refuses settings mwb cannot model. Two GGUF
conventions matter: tensor shapes are stored innermost-first (reversed), and llama.cpp's converter
permutes the rows of Q and K from Hugging Face's rotate-half RoPE layout to interleaved pairs, so
:func:`unpermute_rows` puts them back. Reading and dequantising (Q4_0/Q4_1/Q8_0/K-quants…) is the ``gguf``
package's job. The tokenizer is rebuilt as a Hugging Face ``tokenizer.json`` from the GGUF vocabulary by
``transformers`` and stored with the checkpoint, together with the chat template, so ``mwb generate``
and a later chat endpoint work from the converted directory alone.
"""
from __future__ import annotations

import json
import os
import tempfile

import torch

from . import llama
from .hf_io import ConversionError

ARCHITECTURES = ("llama", "mistral")

# llama.cpp name inside ``blk.N.`` → Hugging Face Llama name inside ``model.layers.N.``
_BLOCK = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# GGUF metadata key (after "<arch>.") → Hugging Face LlamaConfig field
_CONFIG = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
           "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
           "attention.head_count_kv": "num_key_value_heads", "context_length": "max_position_embeddings",
           "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta",
           "rope.dimension_count": "head_dim", "vocab_size": "vocab_size"}


def _require_gguf():
    try:
        import gguf
    except ImportError:
        raise ConversionError('reading GGUF files needs the gguf package: pip install gguf '
                              '(or pip install -e ".[models]")') from None
    return gguf


def open_gguf(path: str):
    """A ``gguf.GGUFReader`` for ``path`` whose architecture is one mwb imports."""
    gguf = _require_gguf()
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:
        raise ConversionError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})") from None
    arch = metadata(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConversionError(f"{path}: GGUF architecture '{arch}' is not supported (supported: "
                              f"{', '.join(ARCHITECTURES)})")
    return reader


def metadata(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def hf_config(reader) -> dict:
    """The Hugging Face ``config.json`` equivalent of the file's metadata (what :mod:`.llama` reads)."""
    arch = metadata(reader, "general.architecture")
    cfg = {"model_type": arch, "architectures": [llama.ARCHITECTURE], "hidden_act": "silu"}
    for key, name in _CONFIG.items():
        value = metadata(reader, f"{arch}.{key}")
        if value is not None:
            cfg[name] = value
    if "vocab_size" not in cfg:
        cfg["vocab_size"] = len(reader.fields["tokenizer.ggml.tokens"].data)
    if metadata(reader, f"{arch}.rope.scaling.type") not in (None, "none"):
        raise ConversionError(f"GGUF RoPE scaling '{metadata(reader, f'{arch}.rope.scaling.type')}' is not "
                              f"supported by mwb (only the default RoPE)")
    if cfg.get("head_dim") == cfg["hidden_size"] // cfg["num_attention_heads"]:
        del cfg["head_dim"]
    cfg["tie_word_embeddings"] = all(t.name != "output.weight" for t in reader.tensors)
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("padding_token_id", "pad_token_id")):
        value = metadata(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            cfg[name] = value
    return cfg


def unpermute_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation: within each head, rows stored as interleaved (even, odd) pairs
    go back to the rotate-half order (all first halves, then all second halves) that mwb's RoPE uses."""
    rows = w.shape[0]
    half = rows // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _hf_name(name: str) -> str:
    base, _, suffix = name.rpartition(".")
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        if part in _BLOCK:
            return f"model.layers.{layer}.{_BLOCK[part]}.{suffix}"
    elif base in _TOP:
        return f"{_TOP[base]}.{suffix}"
    raise ConversionError(f"GGUF tensor '{name}' has no Llama counterpart (is this a Llama-family file?)")


def hf_tensors(reader, cfg: dict, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Every tensor of the file, dequantised to ``dtype``, under its Hugging Face Llama name."""
    gguf = _require_gguf()
    out = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        w = torch.from_numpy(values.reshape([int(d) for d in reversed(t.shape)]).copy()).to(dtype)
        name = _hf_name(t.name)
        if ".attn_q." in t.name:
            w = unpermute_rows(w, cfg["num_attention_heads"])
        elif ".attn_k." in t.name:
            w = unpermute_rows(w, cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        out[name] = w
    return out


def write_tokenizer(path: str, reader, out_dir: str) -> None:
    """``tokenizer.json`` + ``tokenizer_config.json`` (+ ``chat_template.jinja``) in ``out_dir``, built by
    ``transformers`` from the GGUF vocabulary (its GGUF tokenizer conversion is the maintained one)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConversionError('building the tokenizer of a GGUF file needs transformers: pip install '
                              'transformers (or pip install -e ".[models]")') from None
    path = os.path.abspath(path)
    try:
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    except Exception as e:
        raise ConversionError(f"{path}: transformers cannot build its tokenizer ({type(e).__name__}: {e})") \
            from None
    tok.save_pretrained(out_dir)
    template = metadata(reader, "tokenizer.chat_template")
    if template and not os.path.isfile(os.path.join(out_dir, "chat_template.jinja")):
        with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)


def load_gguf(path: str, dtype=torch.float32):
    """(RunConfig, vocab size, {mwb name: tensor}, hf config dict, reader) of a Llama-family GGUF file."""
    from ..config import RunConfig, update

    reader = open_gguf(path)
    hf = hf_config(reader)
    model = llama.model_config(hf)
    tensors = llama.to_mwb(hf_tensors(reader, hf, dtype), model)
    cfg = update(RunConfig(), {"model": model})
    return cfg, int(model["vocab_size"]), tensors, hf, reader


def gguf_to_mwb(src: str, dst: str, overwrite: bool = False, dtype=torch.float32) -> tuple[str, str]:
    """GGUF file → mwb checkpoint directory (weights, tokenizer, chat template, config.json); returns
    (dst, family name)."""
    from ..checkpoint.writer import write_model_checkpoint

    cfg, vocab, tensors, hf, reader = load_gguf(src, dtype)
    with tempfile.TemporaryDirectory(prefix="mwb-gguf-") as tmp:
        tok_dir, hf_dir = os.path.join(tmp, "tokenizer"), os.path.join(tmp, "hf_config")
        os.makedirs(hf_dir)
        write_tokenizer(src, reader, tok_dir)
        with open(os.path.join(hf_dir, "config.json"), "w") as f:
            json.dump(hf, f, indent=2, sort_keys=True)
        write_model_checkpoint(dst, cfg, vocab, tensors, extra_files={"tokenizer": tok_dir, "hf_config": hf_dir},
                               overwrite=overwrite)
    return os.path.abspath(dst), llama.NAME


def is_gguf(path: str) -> bool:
    return os.path.isfile(path) and path.lower().endswith(".gguf")
