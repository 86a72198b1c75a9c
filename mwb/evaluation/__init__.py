"""mwb.evaluation: the task registry, evaluator, metrics, zero-shot LM tasks, generation and the server.

Public API::

    from mwb.evaluation import register_task, get_task, list_tasks, Task, Option, evaluate
    from mwb.evaluation import LanguageModel, generate, SamplingParams, write_results

Everything is imported lazily (``mwb eval --list`` should not pay for torch or datasets twice).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "register_task": "registry", "get_task": "registry", "list_tasks": "registry",
    "Task": "task", "Option": "task", "load_records": "task",
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
