"""``OUT/results.json``: what was evaluated, with what, and what came out — enough to reproduce it.

Why one writer: ``mwb eval`` and ``mwb finetune`` (and anything a user scripts) produce the same record —
task, metrics, checkpoint, the model's config, data path, mwb and torch versions and the time — so results
from different runs can be compared and traced back to the checkpoint they came from.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
import os
from typing import Any, Optional

from mwb.core.atomic import atomic_write_json


def _versions() -> dict:
    import torch
    try:
        from importlib.metadata import version
        mwb_version = version("mwb")
    except Exception:
        mwb_version = "unknown"
    return {"mwb": mwb_version, "torch": torch.__version__}


def _plain(obj: Any) -> Any:
    """JSON-safe: dataclasses → dicts, NaN/inf → strings (strict JSON has neither)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _plain(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def write_results(out_dir: str, task: str, metrics: dict, checkpoint: Optional[str] = None,
                  config: Any = None, extra: Optional[dict] = None) -> str:
    """Write ``out_dir/results.json`` atomically and return its path."""
    record = {"task": task, "metrics": metrics, "checkpoint": checkpoint, "config": config,
              **_versions(), "time": datetime.datetime.now().isoformat(timespec="seconds")}
    if extra:
        record.update(extra)
    path = os.path.join(out_dir, "results.json")
    atomic_write_json(path, _plain(record), indent=2)
    return path
