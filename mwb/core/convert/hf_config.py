"""The one reader of a Hugging Face ``config.json``: what mwb reads from it, checked before anything uses it.

Why one validating reader: a ``config.json`` is user input. Read naively, a JSON list crashes on
``.get`` with an ``AttributeError``, a missing ``n_embd`` with a ``KeyError``, and ``"n_layer": "12"`` or
``"tie_word_embeddings": "false"`` flow into the model as wrong values. Every conversion (``mwb convert``,
``--checkpoint HF_DIR``, retriever imports) reads the file here, so each of those ends in one line naming
the file and the key: the file must hold a JSON object with a string ``model_type``, and for the families
mwb converts, every key the mapping reads must have the JSON type it expects (required keys present,
sizes positive integers, nullable keys ``null`` or that type). Keys mwb does not read are not checked, and
an unknown ``model_type`` is left to the caller (which says the family is not supported).
"""
from __future__ import annotations

import dataclasses
import json
import os

from ..errors import DataError


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One ``config.json`` key a family mapping reads: its JSON type and whether it must be present."""

    name: str
    kind: str  # "int" (a whole number >= minimum), "float" (any number), "bool", "str", "dict", "list"
    required: bool = False
    nullable: bool = False  # ``null`` means "use the default" (e.g. GPT-2's n_inner)
    minimum: int = 1  # for "int"


def _keys(required: str, ints: str = "", floats: str = "", bools: str = "", strs: str = "", nullable_ints: str = "",
          dicts: str = "", lists: str = "") -> tuple:
    out = [ConfigKey(n, "int", required=True) for n in required.split()]
    out += [ConfigKey(n, "int") for n in ints.split()]
    out += [ConfigKey(n, "int", nullable=True) for n in nullable_ints.split()]
    out += [ConfigKey(n, "float") for n in floats.split()]
    out += [ConfigKey(n, "bool") for n in bools.split()]
    out += [ConfigKey(n, "str") for n in strs.split()]
    out += [ConfigKey(n, "dict", nullable=True) for n in dicts.split()]
    out += [ConfigKey(n, "list", nullable=True) for n in lists.split()]
    return tuple(out)


_LLAMA = _keys("hidden_size num_attention_heads num_hidden_layers intermediate_size vocab_size",
               ints="max_position_embeddings", nullable_ints="head_dim num_key_value_heads sliding_window",
               floats="rms_norm_eps rope_theta attention_dropout initializer_range",
               bools="attention_bias mlp_bias tie_word_embeddings", strs="hidden_act",
               dicts="rope_parameters rope_scaling")

# The keys each family's mapping (:mod:`.gpt2`, :mod:`.llama`, :mod:`.bert`, :mod:`.t5`) reads, by model_type.
KEYS = {
    "gpt2": _keys("n_embd n_layer n_head vocab_size n_positions", nullable_ints="n_inner",
                  floats="layer_norm_epsilon resid_pdrop attn_pdrop initializer_range",
                  bools="tie_word_embeddings scale_attn_weights scale_attn_by_inverse_layer_idx add_cross_attention",
                  strs="activation_function"),
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "bert": _keys("num_hidden_layers hidden_size num_attention_heads intermediate_size vocab_size "
                  "max_position_embeddings",
                  floats="layer_norm_eps hidden_dropout_prob attention_probs_dropout_prob initializer_range",
                  bools="tie_word_embeddings is_decoder add_cross_attention",
                  strs="hidden_act position_embedding_type", lists="architectures")
    + (ConfigKey("type_vocab_size", "int", minimum=0),),
    "t5": _keys("num_heads d_kv num_layers d_model d_ff vocab_size",
                ints="n_positions relative_attention_num_buckets relative_attention_max_distance",
                nullable_ints="num_decoder_layers", floats="layer_norm_epsilon dropout_rate",
                bools="is_decoder is_encoder_decoder tie_word_embeddings scale_decoder_outputs",
                strs="feed_forward_proj"),
}

_JSON_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "dict": "an object", "list": "a list"}


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__)


def _fits(value, key: ConfigKey) -> bool:
    if value is None:
        return key.nullable
    if key.kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value >= key.minimum
    if key.kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"bool": bool, "str": str, "dict": dict, "list": list}[key.kind])


def check_config(hf: dict, path: str) -> dict:
    """``hf`` (the parsed ``path``) when every key its family reads has the right type; else DataError."""
    if not isinstance(hf, dict):
        raise DataError(f"{path}: a config.json must be a JSON object, not {_json_type(hf)}")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise DataError(f"{path}: model_type must be a non-empty string (e.g. \"gpt2\", \"llama\", \"bert\", "
                        f"\"t5\"), not {_json_type(model_type) if 'model_type' in hf else 'missing'}")
    for key in KEYS.get(model_type, ()):
        if key.name not in hf:
            if key.required:
                raise DataError(f"{path}: {model_type} config has no '{key.name}' ({_JSON_NAMES[key.kind]})")
            continue
        value = hf[key.name]
        if not _fits(value, key):
            want = _JSON_NAMES[key.kind] + (f" >= {key.minimum}" if key.kind == "int" else "") + \
                (" or null" if key.nullable else "")
            raise DataError(f"{path}: '{key.name}' must be {want}, not {json.dumps(value)[:60]}")
    return hf


def read_config(directory: str) -> dict:
    """The checked ``config.json`` of the Hugging Face directory ``directory`` (see the module docstring)."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
    except FileNotFoundError:
        raise DataError(f"{directory} has no config.json: not a Hugging Face model directory") from None
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path} is not valid JSON ({e})") from None
    return check_config(hf, path)
