"""Model families for pretraining: each supplies a :class:`~mwb.core.training.model_spec.ModelSpec` (how to build a
stage and turn a sample batch into a loss); ``spec_for(arch)`` is how commands and recipes pick one."""
from __future__ import annotations

from .bert import BertSpec
from .gpt import GPTSpec
from .t5 import T5Spec

SPECS = {"gpt": GPTSpec, "bert": BertSpec, "t5": T5Spec}


def spec_for(arch: str):
    """The spec class for ``arch`` (``gpt``, ``bert`` or ``t5``)."""
    try:
        return SPECS[arch]
    except KeyError:
        raise ValueError(f"unknown model arch '{arch}' (known: {', '.join(sorted(SPECS))})") from None


__all__ = ["SPECS", "spec_for", "GPTSpec", "BertSpec", "T5Spec"]
