"""What a reproduction declares: the paper, its claim, the conditions and metrics, the paper's own numbers,
the scales it runs at, and how one (condition, seed) cell runs and is read back.

An experiment is a class in ``mwb/repro/experiments/`` decorated with :func:`mwb.repro.registry.register`,
the way torchtitan registers a ``TrainSpec``: the declarations are frozen records, so ``mwb repro --list``,
the report and the tests read the same facts the runner uses. Every method the runner calls is declared
here with its default, so an experiment overrides only what differs:

``cell_commands``  the ``mwb ...`` argv lists one cell runs (written to ``commands.sh`` as they stand)
``run_cell``       runs them (default) or computes the cell in Python (deterministic experiments)
``read_cell``      reads the cell's outputs back: ``results.json`` metrics and ``predictions.jsonl`` items
``scope``          a paragraph on what a scale can and cannot show, printed in ``report.md``
``plot``           (optional) the experiment's own picture; the default draws each metric per condition

The runner (:mod:`.runner`) owns everything else: cells, reruns, statistics, the verdict and the files.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Callable, ClassVar, Optional, Sequence

from mwb.core.atomic import atomic_write_json
from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.core.named_models import is_model_name
from mwb.evaluation.predictions import FILENAME as PREDICTIONS_FILE
from mwb.evaluation.predictions import read_predictions

SCALES = ("smoke", "cpu", "gpu", "paper")
# Appended to every mwb command a cell runs: a cell's run directory keeps its metrics, not plots or event files.
LOGGING = ("--set", "logging.tensorboard=false", "--set", "logging.plot=false", "--set", "logging.progress=false")
DIRECTIONS = ("greater", "less")
NAME = re.compile(r"[a-z0-9][a-z0-9._+-]*")

# Runs one ``mwb ...`` argv (argv[0] == "mwb"); raises on failure. The CLI passes an in-process invoker, the
# Python API defaults to a ``python -m mwb`` subprocess (see :meth:`Experiment.run_cell`).
Invoke = Callable[[Sequence[str]], None]


@dataclass(frozen=True)
class Paper:
    """A paper the experiment reproduces: ``citation`` as "Author et al. YEAR", the arXiv id, the title."""

    citation: str
    arxiv: str
    title: str

    def short(self) -> str:
        return f"{self.citation} (arXiv {self.arxiv})"


@dataclass(frozen=True)
class PaperValue:
    """A number the paper prints for (condition, metric), and where: table or figure, and the setting.

    ``tolerance`` says how close ours must be to count as the paper's value in a deterministic experiment
    (absolute, or a fraction of the paper's value when ``relative``); ``headline`` rows decide the verdict
    there, the others are reported beside it. Seeded experiments show the value in its own column only.
    """

    condition: str
    metric: str
    value: float
    where: str
    tolerance: Optional[float] = None
    relative: bool = False
    headline: bool = True

    def allowed(self) -> Optional[float]:
        """The largest |ours − paper| that still counts as agreement (None: no tolerance declared)."""
        if self.tolerance is None:
            return None
        return self.tolerance * abs(self.value) if self.relative else self.tolerance

    def within(self, ours: float) -> bool:
        allowed = self.allowed()
        return allowed is not None and math.isfinite(ours) and abs(ours - self.value) <= allowed

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """Condition ``b`` against condition ``a`` on ``metric``: diff = b − a, and the paper's ``direction``
    ("greater": the paper says b is higher; "less": lower). The ``headline`` comparison gives the verdict; a
    claim with several parts declares one headline per ``part`` (a short name), and each part gets its own
    verdict. Non-headline comparisons are exploratory (Holm-adjusted p, no verdict word)."""

    a: str
    b: str
    metric: str
    direction: str
    headline: bool = False
    part: str = ""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"comparison direction must be one of {DIRECTIONS}, got {self.direction!r}")


@dataclass(frozen=True)
class Pilot:
    """A hyperparameter chosen in a pilot run before the report: the ``setting`` (e.g. "lr"), the value
    chosen, the pilot's ``seeds`` (declared disjoint from the report's seeds), and what the pilot measured
    (``numbers``: candidate value → the pilot's number, ``measure`` naming it). ``overlap_note`` is set only for
    a pilot made before this rule, whose seeds overlap the report's: it says so honestly."""

    setting: str
    chosen: str
    seeds: tuple
    numbers: dict
    measure: str
    overlap_note: str = ""


@dataclass(frozen=True)
class Scale:
    """One size of the experiment. ``params`` are what the experiment's methods read (steps, shapes,
    sizes); ``budget`` is the promise ("≤ 2 min on 2 cores"); ``seeds`` the default ``--seeds``."""

    name: str
    description: str
    params: dict = field(default_factory=dict)
    budget: str = ""
    seeds: int = 3


@dataclass(frozen=True)
class DataOption:
    """A ``--set key=value`` a ``paper``-scale run takes (the paper's data paths); no default: required.

    ``path``: the value names a file or directory (or a named model) that must exist when the run starts;
    ``--dry-run`` does not look, so a paper-scale plan can be printed on a machine without the data."""

    help: str
    default: Optional[str] = None
    path: bool = False


@dataclass(frozen=True)
class PlanSpec:
    """The paper's model on the paper's cluster, as ``mwb plan`` takes it: ``--dry-run`` at ``paper`` scale
    prints :meth:`argv` and the planner's time, memory and energy estimate for it."""

    label: str
    preset: str
    gpus: int
    global_batch_size: int
    seq_length: int
    hardware: str = "a100-80gb"
    tp: Optional[int] = None
    pp: Optional[int] = None
    train_tokens: Optional[float] = None
    precision: Optional[str] = None  # bf16 | fp16 | fp32 (mwb plan's default: bf16)
    recompute: Optional[str] = None  # none | selective | full (None: searched)
    sp: Optional[bool] = None
    distributed_optimizer: Optional[bool] = None

    def argv(self) -> list[str]:
        out = ["mwb", "plan", "--preset", self.preset, "--gpus", str(self.gpus), "--hardware", self.hardware,
               "--global-batch-size", str(self.global_batch_size), "--seq-length", str(self.seq_length)]
        for flag, value in (("--tp", self.tp), ("--pp", self.pp), ("--precision", self.precision),
                            ("--recompute", self.recompute)):
            if value is not None:
                out += [flag, str(value)]
        if self.sp is not None:
            out.append("--sp" if self.sp else "--no-sp")
        if self.distributed_optimizer is not None:
            out.append("--distributed-optimizer" if self.distributed_optimizer else "--no-distributed-optimizer")
        if self.train_tokens is not None:
            out += ["--train-tokens", f"{self.train_tokens:g}"]
        return out


@dataclass(frozen=True)
class CellResult:
    """What one cell produced: run-level ``metrics`` (name → number), the per-item ``predictions`` (records
    of ``predictions.jsonl``, paired by id across conditions) when the evaluation writes them, and
    ``details`` (JSON-able extras the report lists, e.g. a measurement's breakdown)."""

    metrics: dict
    predictions: Optional[list] = None
    details: dict = field(default_factory=dict)


class Experiment:
    """One paper's claim as a runnable experiment. Subclasses set the class attributes and override methods.

    ``conditions`` are path-safe names (lowercase letters, digits, ``._+-``); ``metrics`` name the numbers a
    cell reports, as ``results.json`` does. A ``deterministic`` experiment has no seeds: it computes values
    (parameter counts, bytes, planner predictions) and its verdict compares them with ``paper_values``
    within each value's tolerance; a seeded one gets its verdict from the headline :class:`Comparison`.
    """

    name: ClassVar[str] = ""  # set by @register
    papers: ClassVar[tuple] = ()  # Paper, ...
    claim: ClassVar[str] = ""  # one sentence: the headline effect and its direction
    conditions: ClassVar[tuple] = ()
    metrics: ClassVar[tuple] = ()
    comparisons: ClassVar[tuple] = ()  # Comparison, ...
    paper_values: ClassVar[tuple] = ()  # PaperValue, ...
    scales: ClassVar[dict] = {}  # name → Scale, for each of SCALES
    deterministic: ClassVar[bool] = False
    in_process: ClassVar[bool] = True  # False: run_cell always starts `python -m mwb` subprocesses
    paper_options: ClassVar[dict] = {}  # key → DataOption, the paper-scale data flags (--set key=value)
    # conditions whose cells do not depend on the training seed (a zero-shot prompt, an untrained model): run
    # once (the first seed) and compared as one run against every seed of the other side
    seed_independent: ClassVar[tuple] = ()
    pilots: ClassVar[tuple] = ()  # Pilot, ...: every hyperparameter a pilot chose, with the pilot's numbers

    # ------------------------------------------------------------------------------ declarations by scale

    def scale(self, name: str) -> Scale:
        if name not in self.scales:
            raise ConfigError(f"{self.name}: unknown scale {name!r} (known: {', '.join(self.scales)})")
        return self.scales[name]

    def conditions_for(self, scale: Scale) -> tuple:
        """The conditions run at ``scale`` (default: all of ``conditions``)."""
        return tuple(self.conditions)

    def paper_values_for(self, scale: Scale) -> tuple:
        """The paper's numbers that apply at ``scale`` (default: ``paper_values`` for conditions run there).
        Experiments whose paper value depends on the shape measured (a formula evaluated at it) override."""
        run = set(self.conditions_for(scale))
        return tuple(v for v in self.paper_values if v.condition in run)

    def plan_specs(self, scale: Scale) -> tuple:
        """The paper's model/cluster for ``mwb plan`` (:class:`PlanSpec`, ...), printed by ``--dry-run`` at
        ``paper`` scale with the planner's estimate. Default: none."""
        return ()

    # -------------------------------------------------------------------------------------- one cell

    def cell_commands(self, condition: str, seed: int, scale: Scale, cell_dir: str, options: dict) -> list:
        """The ``mwb ...`` argv lists (each starting with ``"mwb"``) that run one cell, in order. They write
        into ``cell_dir``; by convention the last one evaluates with ``--out CELL_DIR`` so that
        :meth:`read_cell` finds ``results.json`` and ``predictions.jsonl`` there. ``commands.sh`` holds them
        as they stand. Default: none (a deterministic experiment computes its cells in :meth:`run_cell`)."""
        return []

    def run_cell(self, condition: str, seed: int, scale: Scale, cell_dir: str, options: dict,
                 invoke: Invoke) -> CellResult:
        """Run one cell and return what it produced. Default: each of :meth:`cell_commands` through
        ``invoke``, then :meth:`read_cell`.

        Which ``invoke``: ``mwb repro`` passes one that calls the click command object in this process
        (``cli.main(args, standalone_mode=False)``): every cell then goes through exactly the functions the
        typed command does, without a new interpreter and torch import per command, and errors arrive as
        the same exceptions. Commands each seed their own RNGs and write only under their ``--out``, so
        cells do not leak state into one another. An experiment whose commands are not safe in one process
        (``--nproc N`` launchers, process-wide settings) sets ``in_process = False`` and gets a
        ``python -m mwb`` subprocess per command, which is also the default outside the CLI (the repro
        layer sits below ``mwb.cli`` and does not import it). Deterministic experiments override this to
        compute their values in Python."""
        for argv in self.cell_commands(condition, seed, scale, cell_dir, options):
            invoke(argv)
        return self.read_cell(condition, seed, scale, cell_dir)

    def read_cell(self, condition: str, seed: int, scale: Scale, cell_dir: str) -> CellResult:
        """Read a finished cell's outputs: ``cell_dir/results.json``'s ``metrics`` (those named in
        ``metrics``) and, when present, ``cell_dir/predictions.jsonl``. A metric missing from the results is
        a DataError naming the file: a cell that did not measure what it declares is not finished."""
        path = os.path.join(cell_dir, "results.json")
        try:
            with open(path, encoding="utf-8") as f:
                found = json.load(f).get("metrics", {})
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{self.name} {condition} seed {seed}: cannot read {path} ({e})") from e
        metrics = {}
        for m in self.metrics:
            if m not in found:
                raise DataError(f"{path} has no metric {m!r} (it has: {', '.join(sorted(found)) or 'none'})")
            metrics[m] = float(found[m])
        preds = os.path.join(cell_dir, PREDICTIONS_FILE)
        return CellResult(metrics, read_predictions(preds) if os.path.isfile(preds) else None)

    # ---------------------------------------------------------------------------------------- reporting

    def scope(self, scale: Scale) -> str:
        """What a run at ``scale`` can and cannot show, for ``report.md``. Default: the scale's description;
        every experiment should say more (the data, the sizes, what the paper had that this run has not)."""
        return scale.description

    def plot(self, results: dict, path: str) -> bool:
        """Draw this experiment's own picture of ``results`` (the ``results.json`` record) into the PNG
        ``path`` and return True: a curve over shots or model sizes says more than bars. Default: False, and
        the runner draws each metric per condition with 95% intervals over seeds (deterministic experiments:
        ours / paper with the tolerances)."""
        return False

    def check_options(self, scale: Scale, options: dict) -> dict:
        """``--set`` options completed with defaults; unknown keys, options below ``paper`` scale and
        missing required ones are ConfigErrors naming the key."""
        if options and scale.name != "paper":
            raise ConfigError(f"--set {next(iter(options))}=... applies to --scale paper (the paper's data), "
                              f"not --scale {scale.name}")
        unknown = sorted(set(options) - set(self.paper_options))
        if unknown:
            known = ", ".join(self.paper_options) or "none"
            raise ConfigError(f"{self.name}: unknown --set key {unknown[0]!r} (paper-scale keys: {known})")
        if scale.name != "paper":
            return {}
        out = dict(options)
        for key, opt in self.paper_options.items():
            if key not in out:
                if opt.default is None:
                    raise ConfigError(f"{self.name} --scale paper needs --set {key}=VALUE ({opt.help})")
                out[key] = opt.default
        return out

    def check_inputs(self, scale: Scale, options: dict) -> None:
        """Before a real (not ``--dry-run``) run: every ``path`` option given exists, else one DataError line
        naming the key, so a run that would fail in its first command fails before it writes anything."""
        if scale.name != "paper":
            return
        for key, opt in self.paper_options.items():
            value = options.get(key)
            if opt.path and value and not (os.path.exists(os.path.expanduser(value)) or is_model_name(value)):
                raise DataError(f"{self.name}: --set {key}={value}: no such file or directory ({opt.help})")

    def validate(self) -> None:
        """The declarations are consistent: raises ValueError naming the first problem (run at registration)."""
        if not self.papers or not self.claim or not self.conditions_for_all() or not self.metrics:
            raise ValueError(f"experiment {self.name!r} must declare papers, claim, conditions and metrics")
        missing = [s for s in SCALES if s not in self.scales]
        if missing:
            raise ValueError(f"experiment {self.name!r} declares no {missing[0]!r} scale")
        for c in self.conditions_for_all():
            if not NAME.fullmatch(c):
                raise ValueError(f"experiment {self.name!r}: condition {c!r} is not a path-safe name")
        conds = set(self.conditions_for_all())
        for c in self.comparisons:
            for side in (c.a, c.b):
                if side not in conds:
                    raise ValueError(f"experiment {self.name!r}: comparison names unknown condition {side!r}")
            if c.metric not in self.metrics:
                raise ValueError(f"experiment {self.name!r}: comparison names unknown metric {c.metric!r}")
        heads = [c.part for c in self.comparisons if c.headline]
        if not self.deterministic and (not heads or len(set(heads)) != len(heads)):
            raise ValueError(f"experiment {self.name!r}: a seeded experiment needs exactly one headline comparison "
                             f"per part of its claim (headline parts: {heads})")
        for c in self.seed_independent:
            if c not in conds:
                raise ValueError(f"experiment {self.name!r}: seed-independent condition {c!r} is not a condition")
        report_seeds = set(range(max(s.seeds for s in self.scales.values())))
        for pilot in self.pilots:
            if set(pilot.seeds) & report_seeds and not pilot.overlap_note:
                raise ValueError(f"experiment {self.name!r}: pilot {pilot.setting!r} ran on seeds {pilot.seeds}, "
                                 f"which are report seeds; declare pilot seeds outside them")

    def definition(self, scale: Scale) -> dict:
        """What the experiment's verdict depends on, as declared: conditions, metrics, comparisons (headline
        included), seed-independent conditions and the scale's settings. Its hash goes into ``env.json`` and
        every ``cell.json``."""
        return {"experiment": self.name, "conditions": list(self.conditions_for(scale)),
                "metrics": list(self.metrics), "comparisons": [asdict(c) for c in self.comparisons],
                "seed_independent": list(self.seed_independent),
                "scale": {"name": scale.name, "params": scale.params, "seeds": scale.seeds}}

    def definition_hash(self, scale: Scale) -> str:
        """sha256 of :meth:`definition` as canonical JSON (sorted keys), the first 16 hex digits."""
        text = json.dumps(self.definition(scale), sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def conditions_for_all(self) -> tuple:
        """Every condition any scale runs (for validation and listing)."""
        out: list = list(self.conditions)
        for s in self.scales.values():
            out += [c for c in self.conditions_for(s) if c not in out]
        return tuple(out)


class ComputedExperiment(Experiment):
    """A deterministic experiment whose cells are computed in Python (parameter counts, planner output,
    measured bytes), not run as commands: :meth:`compute_cell` gives the values, which are kept in
    ``cell_dir/values.json`` (written atomically, :mod:`mwb.core.atomic`) so that a rerun reads them back
    instead of computing them again. ``cell_commands`` still lists the ``mwb plan`` commands that print the
    same numbers, for ``commands.sh``."""

    deterministic: ClassVar[bool] = True
    VALUES: ClassVar[str] = "values.json"

    def compute_cell(self, condition: str, seed: int, scale: Scale, cell_dir: str, options: dict) -> CellResult:
        raise NotImplementedError(f"{type(self).__name__} must implement compute_cell")

    def run_cell(self, condition, seed, scale, cell_dir, options, invoke) -> CellResult:
        res = self.compute_cell(condition, seed, scale, cell_dir, options)
        atomic_write_json(os.path.join(cell_dir, self.VALUES), {"metrics": res.metrics, "details": res.details})
        return res

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        path = os.path.join(cell_dir, self.VALUES)
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{self.name} {condition}: cannot read {path} ({e})") from e
        return CellResult(rec["metrics"], None, rec.get("details", {}))
