"""mwb.evaluation: the harness engine under the tasks — evaluator (data-parallel sharding), the language-model
wrapper, generation, metrics, data readers, results.json and the OpenAI-compatible server.

Tasks themselves (what is evaluated) live in :mod:`mwb.tasks`, one registry for ``mwb eval`` and
``mwb finetune``. Public API::

    from mwb.evaluation import evaluate, LanguageModel, generate, SamplingParams, write_results, load_records

Everything is imported lazily (``mwb eval --list`` should not pay for torch or datasets twice).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "load_records": "records", "read_text": "records",
    "evaluate": "evaluator",
    "LanguageModel": "lm",
    "generate": "generation", "SamplingParams": "generation", "Generation": "generation",
    "generate_seq2seq": "seq2seq", "Seq2SeqModel": "seq2seq",
    "write_results": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'mwb.evaluation' has no attribute {name!r}")
