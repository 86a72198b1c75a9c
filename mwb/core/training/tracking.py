"""Experiment trackers: W&B, MLflow and TensorBoard behind one fan-out, for ``--log wandb|mlflow|tensorboard``.

Why: labs compare sweeps in the dashboards they already use (Megatron-LM and torchtitan log to W&B, NeMo to
W&B and MLflow); mwb's own record stays ``config.yaml`` + ``metrics.jsonl``. A tracker receives exactly those
numbers, from the one place that writes them (:class:`~.metrics_log.MetricsLogger`, and ``mwb repro`` for its
cells and comparison table), so what a dashboard shows is what ``metrics.jsonl`` holds, field by field.

* **wandb**: ``wandb.init(dir=OUT)``, offline unless the user set ``WANDB_MODE`` (no network is the normal case
  on a cluster's compute nodes: ``wandb sync OUT/wandb/offline-run-*`` uploads later); ``WANDB_PROJECT``
  [mwb] and ``WANDB_ENTITY`` are W&B's own variables.
* **mlflow**: a run in ``MLFLOW_TRACKING_URI`` when set, else in a local ``file:OUT/mlruns`` store (``mlflow
  ui --backend-store-uri OUT/mlruns``); experiment ``MLFLOW_EXPERIMENT_NAME`` [mwb]. Config fields become
  params (``section.field``), every number a metric at its step, tables JSON artifacts.
* **tensorboard**: a ``SummaryWriter`` under ``OUT/tensorboard``. Training runs write TensorBoard by default
  already (``logging.tensorboard``), so there ``--log tensorboard`` only makes sure it is on.

The libraries are optional (``pip install 'mwb[tracking]'``), imported when a tracker opens; a missing one is
a :class:`~mwb.core.config.ConfigError` (one line, exit status 2). Row keys: a training row's fields as they
are (``loss``, ``lr``, ``energy_j`` ...), a validation row's as ``valid/<field>``; booleans become 0/1,
non-numbers are left out of the metrics (they stay in ``metrics.jsonl``).
"""
from __future__ import annotations

import math
import os
from typing import Iterable, Optional, Protocol, Sequence

from ..config import ConfigError

BACKENDS = ("wandb", "mlflow", "tensorboard")


class Tracker(Protocol):
    def log_config(self, config: dict) -> None: ...
    def log_metrics(self, metrics: dict, step: int) -> None: ...
    def log_summary(self, summary: dict) -> None: ...
    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None: ...
    def close(self) -> None: ...


def numeric(metrics: dict) -> dict:
    """The fields a dashboard can plot: numbers (bools as 0/1; "nan"/"inf" strings of metrics.jsonl as floats)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            out[k] = int(v)
        elif isinstance(v, (int, float)):
            out[k] = v
        elif isinstance(v, str) and v.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            out[k] = float(v)
    return out


def flatten(tree: dict, prefix: str = "") -> dict:
    """``{"train": {"steps": 3}}`` → ``{"train.steps": 3}``."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _require(module: str, extra: str = "tracking"):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"--log {module} needs the {module} package: pip install 'mwb[{extra}]' "
                          f"(or pip install {module}) ({e})") from None


class WandbTracker:
    def __init__(self, out_dir: str, run_name: str, config: Optional[dict] = None) -> None:
        wandb = _require("wandb")
        os.makedirs(out_dir, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "mwb"), dir=os.path.abspath(out_dir),
                              name=run_name, config=config or {}, mode=os.environ.get("WANDB_MODE", "offline"),
                              reinit="create_new")
        self._wandb = wandb

    def log_config(self, config: dict) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.run.log(numeric(metrics), step=int(step))

    def log_summary(self, summary: dict) -> None:
        for k, v in numeric(summary).items():
            self.run.summary[k] = v

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
        self.run.log({name: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    def __init__(self, out_dir: str, run_name: str, config: Optional[dict] = None) -> None:
        _require("mlflow")
        from mlflow.tracking import MlflowClient
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # MLflow 3 keeps its file store in maintenance mode behind this opt-in; the user's URI wins
            uri = "file:" + os.path.abspath(os.path.join(out_dir, "mlruns"))
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "mwb")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        if config:
            self.log_config(config)

    def log_config(self, config: dict) -> None:
        from mlflow.entities import Param
        params = [Param(k, str(v)[:6000]) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def log_metrics(self, metrics: dict, step: int) -> None:
        import time

        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, int(step)) for k, v in numeric(metrics).items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_summary(self, summary: dict) -> None:
        self.client.log_dict(self.run_id, summary, "summary.json")
        self.log_metrics({k: v for k, v in numeric(summary).items() if math.isfinite(float(v))}, step=0)

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
        self.client.log_dict(self.run_id, {"columns": list(columns), "rows": [list(r) for r in rows]},
                             f"{name}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TensorBoardTracker:
    def __init__(self, out_dir: str, run_name: str, config: Optional[dict] = None) -> None:
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(os.path.join(out_dir, "tensorboard"))
        if config:
            self.log_config(config)

    def log_config(self, config: dict) -> None:
        import yaml
        self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```")

    def log_metrics(self, metrics: dict, step: int) -> None:
        for k, v in numeric(metrics).items():
            self.writer.add_scalar(k, v, int(step))

    def log_summary(self, summary: dict) -> None:
        for k, v in numeric(summary).items():
            self.writer.add_scalar(f"summary/{k}", v, 0)

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
        lines = ["| " + " | ".join(map(str, columns)) + " |", "|" + " --- |" * len(columns)]
        lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
        self.writer.add_text(name, "\n".join(lines))

    def close(self) -> None:
        self.writer.close()


OPENERS = {"wandb": WandbTracker, "mlflow": MlflowTracker, "tensorboard": TensorBoardTracker}


def check_backends(names: Iterable[str]) -> tuple[str, ...]:
    """The distinct names, in order; a ConfigError for one mwb does not know."""
    out: list[str] = []
    for n in names:
        if n not in BACKENDS:
            raise ConfigError(f"--log {n}: unknown tracker (choose from {', '.join(BACKENDS)})")
        if n not in out:
            out.append(n)
    return tuple(out)


class FanOut:
    """Every call goes to every tracker; with none it does nothing (the default run logs no more than before)."""

    def __init__(self, trackers: Sequence[Tracker] = ()) -> None:
        self.trackers = list(trackers)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def log_config(self, config: dict) -> None:
        for t in self.trackers:
            t.log_config(config)

    def log_metrics(self, metrics: dict, step: int) -> None:
        for t in self.trackers:
            t.log_metrics(metrics, step)

    def log_summary(self, summary: dict) -> None:
        for t in self.trackers:
            t.log_summary(summary)

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
        for t in self.trackers:
            t.log_table(name, columns, rows)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
        self.trackers = []


def open_trackers(names: Iterable[str], out_dir: str, run_name: Optional[str] = None,
                  config: Optional[dict] = None) -> FanOut:
    """One tracker per name (``wandb``, ``mlflow``, ``tensorboard``) writing under ``out_dir``; the run is named
    ``run_name`` (default: the directory's name). Trackers opened before a failing one are closed."""
    run_name = run_name or os.path.basename(os.path.abspath(out_dir))
    opened: list = []
    try:
        for n in check_backends(names):
            opened.append(OPENERS[n](out_dir, run_name, config))
    except BaseException:
        FanOut(opened).close()
        raise
    return FanOut(opened)


def check_available(names: Iterable[str]) -> tuple[str, ...]:
    """:func:`check_backends`, and a ConfigError naming the pip command for a library that is not installed
    (in the launching process, before any rank starts)."""
    import importlib.util
    names = check_backends(names)
    for n in names:
        if importlib.util.find_spec(n) is None:
            raise ConfigError(f"--log {n} needs the {n} package: pip install 'mwb[tracking]' (or pip install {n})")
    return names
