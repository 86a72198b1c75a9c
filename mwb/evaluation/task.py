"""The task interface every evaluation (and fine-tuning) task implements, and local/hub data loading.

A task is split into four steps so the :mod:`evaluator <mwb.evaluation.evaluator>` can shard the work over
data-parallel ranks without knowing anything about the task:

``load(path)``        raw examples (list of dicts) from a local file or a hub dataset name
``build(examples)``   the units of work ("items"), deterministic, built identically on every rank
``run(lm, items)``    per-item results (picklable) for this rank's share of the items
``aggregate(results)`` the metrics, from every rank's results put back in item order

Task-specific command-line options (``--strict`` for LAMBADA, ``--retriever`` for QA, …) are declared in
``Task.options`` and parsed by ``mwb eval`` from the arguments it does not know itself.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

from mwb.core.config import ConfigError
from mwb.core.errors import DataError

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")


@dataclass(frozen=True)
class Option:
    """A task option: ``type`` is bool (a flag), int, float or str; ``default`` when not given."""
    type: type
    default: Any = None
    help: str = ""


class Task:
    """Base class. Subclasses set ``name`` (via ``@register_task``), ``description``, ``default_data`` (a
    bundled sample path, or None) and ``options``, and implement :meth:`build`, :meth:`run` and
    :meth:`aggregate`. ``kind`` is ``"zeroshot"`` (evaluate a pretrained LM as is) or ``"finetune"``."""

    name: ClassVar[str] = "task"
    description: ClassVar[str] = ""
    kind: ClassVar[str] = "zeroshot"
    default_data: ClassVar[Optional[str]] = None
    options: ClassVar[dict[str, Option]] = {}

    def __init__(self, **opts: Any) -> None:
        unknown = set(opts) - set(self.options)
        if unknown:
            raise ConfigError(f"task '{self.name}' has no option(s) {', '.join(sorted(unknown))} "
                              f"(it takes: {', '.join(sorted(self.options)) or 'none'})")
        self.opts = {k: opts.get(k, o.default) for k, o in self.options.items()}

    # --- steps -------------------------------------------------------------------------------------
    def load(self, path: Optional[str]) -> list[dict]:
        """Raw examples; the default reads records through :func:`load_records`."""
        return load_records(self.data_path(path))

    def build(self, examples: list[dict], lm) -> list[Any]:
        raise NotImplementedError

    def run(self, lm, items: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def aggregate(self, results: list[Any]) -> dict[str, float]:
        raise NotImplementedError

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        """``(run config, model object handed to build/run)``; a GPT :class:`~mwb.evaluation.lm.LanguageModel`
        by default. Tasks that evaluate another kind of model (a fine-tuned classifier) override this."""
        from .loading import load_language_model
        return load_language_model(checkpoint, tokenizer, device=device)

    # --- helpers -----------------------------------------------------------------------------------
    def data_path(self, path: Optional[str]) -> str:
        if path:
            return path
        if self.default_data:
            return self.default_data
        raise ConfigError(f"task '{self.name}' needs --data PATH (it has no bundled sample)")

    def describe(self) -> dict:
        """What results.json records about the task besides its metrics."""
        return {"name": self.name, "kind": self.kind, "options": dict(self.opts)}


# ----------------------------------------------------------------------------------------- options


def parse_task_args(task_cls: type, args: Sequence[str]) -> dict:
    """``['--strict', '--top-k', '5']`` → ``{'strict': True, 'top_k': 5}`` for the options ``task_cls`` declares.

    Flags are written with dashes on the command line and underscores in ``Task.options``; ``--x=v`` works too.
    """
    out: dict[str, Any] = {}
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' for task '{task_cls.name}'")
        key, eq, value = arg[2:].partition("=")
        name = key.replace("-", "_")
        negate = name.startswith("no_") and name[3:] in task_cls.options
        opt = task_cls.options.get(name[3:] if negate else name)
        if opt is None:
            known = ", ".join("--" + k.replace("_", "-") for k in sorted(task_cls.options)) or "none"
            raise ConfigError(f"task '{task_cls.name}' has no option --{key} (it takes: {known})")
        if opt.type is bool:
            out[name[3:] if negate else name] = (not negate) if not eq else value.lower() in ("1", "true", "yes")
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise ConfigError(f"option --{key} of task '{task_cls.name}' needs a value")
            value = args[i + 1]
            i += 1
        try:
            out[name] = opt.type(value)
        except ValueError:
            raise ConfigError(f"option --{key} expects {opt.type.__name__}, got {value!r}") from None
        i += 1
    return out


# ------------------------------------------------------------------------------------------- data

_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".tsv": "csv"}


def _cache_dir() -> str:
    root = os.environ.get("MWB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mwb")
    return os.path.join(root, "hf_datasets")


def load_records(path: str, split: str = "train", name: Optional[str] = None) -> list[dict]:
    """Records (one dict per row) from a local ``.json/.jsonl/.csv/.tsv/.parquet`` file (read with
    ``datasets``), or a hub dataset name (``owner/name`` or ``name``, optional ``name:config``) when online.

    Why ``datasets``: one reader for every format the official releases use, and hub names for free when
    a network is there. A missing local file is a DataError naming the formats accepted.
    """
    local = os.path.expanduser(path)
    if os.path.exists(local):
        ext = next((e for e in _FORMATS if local.lower().endswith(e)), None)
        if ext is None:
            raise DataError(f"{path}: unsupported data format (use {', '.join(sorted(_FORMATS))})")
        try:
            import datasets
        except ImportError:  # an install without `datasets` can still read the official jsonl files
            if ext == ".jsonl":
                return _read_jsonl(local)
            raise DataError(f"reading {path} needs the `datasets` package: pip install datasets") from None
        kw = {"delimiter": "\t"} if ext == ".tsv" else {}
        try:
            ds = datasets.load_dataset(_FORMATS[ext], data_files=local, split="train", cache_dir=_cache_dir(), **kw)
        except Exception as e:  # malformed rows: name the file
            raise DataError(f"could not read {path} as {_FORMATS[ext]}: {e}") from e
        return [dict(r) for r in ds]
    looks_local = path.startswith((".", "/", "~")) or any(path.lower().endswith(e) for e in _FORMATS)
    if looks_local:
        raise DataError(f"data file not found: {path}")
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise DataError(f"data file not found: {path} (and hub datasets are unavailable offline: "
                        f"give a local .jsonl/.json/.csv/.parquet file)")
    hub, _, config = path.partition(":")
    try:
        import datasets

        ds = datasets.load_dataset(hub, config or name, split=split, cache_dir=_cache_dir())
    except Exception as e:
        raise DataError(f"{path} is neither a local file nor a loadable hub dataset ({e})") from e
    return [dict(r) for r in ds]


def _read_jsonl(path: str) -> list[dict]:
    import json

    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid JSON ({e})") from None
    return rows


def read_text(path: str) -> str:
    """A whole text file as it is (UTF-8), for tasks defined on raw text such as WikiText."""
    local = os.path.expanduser(path)
    if not os.path.isfile(local):
        raise DataError(f"data file not found: {path}")
    try:
        with open(local, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e})") from None
