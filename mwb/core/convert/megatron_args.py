"""Checks of a Megatron checkpoint's ``args``: their types before any reader computes with them, and after the
merge that the tensors have the shapes the architecture they describe needs.

``args`` is whatever the training run (or a hand edit, or another tool's writer, or NeMo's YAML turned into a
Namespace) put there, so a field may be a string, a list or ``None`` where an integer belongs. Unchecked, such
a value surfaces deep inside the merge as a ``TypeError`` or ``ValueError`` with no hint of which field is
wrong; checked here first, it is one ``ConversionError`` line naming the field. Absent (or ``None``) fields
are left to the readers, which know which ones the architecture needs and what the defaults are.

Well-typed but wrong sizes (``hidden_size`` 8 beside 16-wide tensors) merge without complaint and would be
written as a checkpoint that no model loads; :func:`check_shapes` compares every merged tensor with the one
the mwb model of that config has (built on the meta device: no memory) and refuses the conversion instead.
"""
from __future__ import annotations

import math

import torch

from ..models.arch import make_model
from .hf_io import ConversionError

# positive integers: sizes, counts, parallel degrees
POSITIVE_INTS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "kv_channels",
                 "max_position_embeddings", "num_query_groups", "padded_vocab_size", "make_vocab_size_divisible_by",
                 "tensor_model_parallel_size", "model_parallel_size", "pipeline_model_parallel_size",
                 "virtual_pipeline_model_parallel_size")
# finite real numbers (an int is one too; a bool is not)
NUMBERS = ("norm_epsilon", "layernorm_epsilon", "hidden_dropout", "attention_dropout", "init_method_std",
           "rotary_base", "rotary_percent")
STRINGS = ("position_embedding_type", "normalization", "tokenizer_type")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_args(args, where: str) -> None:
    """Raise ConversionError naming the first field of ``args`` whose value has the wrong type."""
    if args is None:
        return
    for name in POSITIVE_INTS:
        v = getattr(args, name, None)
        if v is not None and not (_is_int(v) and v > 0):
            raise ConversionError(f"{where}: the checkpoint's args.{name} is {v!r:.60}, not a positive integer")
    for name in NUMBERS:
        v = getattr(args, name, None)
        if v is not None and not ((_is_int(v) or isinstance(v, float)) and math.isfinite(v) and v >= 0):
            raise ConversionError(f"{where}: the checkpoint's args.{name} is {v!r:.60}, not a number ≥ 0")
    for name in STRINGS:
        v = getattr(args, name, None)
        if v is not None and not isinstance(v, str):
            raise ConversionError(f"{where}: the checkpoint's args.{name} is {v!r:.60}, not a string")


def check_version(value, where: str, known: tuple) -> float:
    """``checkpoint_version`` as a float when it is a number mwb knows (it fixes the QKV row order)."""
    if _is_int(value) or isinstance(value, float):
        if float(value) in known:
            return float(value)
    raise ConversionError(f"{where}: checkpoint_version {value!r:.40} is not one mwb knows (0, 1.0, 2.0, 3.0)")


def check_shapes(model_cfg, vocab: int, tensors: dict, where: str) -> None:
    """Raise ConversionError when a merged tensor's shape is not what ``model_cfg``'s mwb model needs."""
    try:
        with torch.device("meta"):
            want = make_model(model_cfg, vocab, vocab).state_dict()
    except (ValueError, TypeError, AssertionError, ZeroDivisionError, RuntimeError) as e:
        raise ConversionError(f"{where}: the checkpoint's args describe no model mwb can build "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})") from None
    for name, t in sorted(tensors.items()):
        if name in want and tuple(want[name].shape) != tuple(t.shape):
            raise ConversionError(f"{where}: {name} is {list(t.shape)} in the checkpoint but its args describe a "
                                  f"model that needs {list(want[name].shape)} (args and weights disagree)")
