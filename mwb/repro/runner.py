"""Run an experiment: every (condition, seed) cell, resumable, then the comparisons, the verdict and the files.

Cells live in ``OUT/cells/<condition>/seed<k>/``. A cell is finished only when its ``cell.json`` exists: it is
written last, atomically (:mod:`mwb.core.atomic`), after the cell's commands succeeded and its per-item records
were copied to ``OUT/predictions/<condition>/seed<k>.jsonl``. A rerun with the same ``--out`` reads a finished
cell back only when its recorded command lines and the experiment's definition hash equal the plan's; any other
cell (stopped half way, failed, or made by other commands or another definition) is deleted and run again from
scratch, and the log says which cells and why. A seed-independent condition has one cell (the first seed).

A report under ``reproductions/`` (the committed ones) is refused from a dirty tree unless ``allow_dirty``, in
which case ``env.json`` marks it.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from mwb.core.atomic import atomic_write_json
from mwb.core.config import ConfigError
from mwb.core.errors import DataError, MwbError
from mwb.evaluation.predictions import read_predictions, write_predictions

from . import analysis, paper_plan, report
from .api import CellResult, Experiment, Invoke, Scale
from .env import EnvRecorder, git_commit
from .track import track_results

CELL_FILE = "cell.json"
# results.json's "statistics": the method its comparisons were made with (reports without it: legacy-pooled)
STATISTICS = "two-level"


@dataclass(frozen=True)
class Cell:
    condition: str
    seed: int
    dir: str

    @property
    def label(self) -> str:
        return f"{self.condition} seed {self.seed}"


@dataclass(frozen=True)
class RunPlan:
    """What a run will do: the experiment at a scale, its seeds, its cells, where, with which options."""

    exp: Experiment
    scale: Scale
    seeds: tuple
    out: str
    options: dict
    cells: tuple
    note: str = ""  # said to the user before running (e.g. why --seeds does not apply)
    allow_dirty: bool = False  # write a report under reproductions/ from an uncommitted tree (marked as such)


def default_out(name: str, scale: str) -> str:
    return os.path.join("reproductions-runs", f"{name}-{scale}")


def plan_run(exp: Experiment, scale: str = "cpu", seeds: Optional[int] = None, out: Optional[str] = None,
             options: Optional[dict] = None, allow_dirty: bool = False, first_seed: int = 0) -> RunPlan:
    """Resolve the scale, seeds, output directory and options into the list of cells (ConfigError if bad).

    Seeds are ``first_seed .. first_seed + seeds - 1``: a reviewer re-runs a committed report on new seeds
    (``--first-seed 5``) and checks that its verdict holds. Seeds a pilot tuned on are refused for a report
    under ``reproductions/`` (the pilot chose a setting on them) and flagged anywhere else."""
    sc = exp.scale(scale)
    opts = exp.check_options(sc, dict(options or {}))
    note = ""
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {seeds}")
    if first_seed < 0:
        raise ConfigError(f"--first-seed must be at least 0, got {first_seed}")
    out = out or default_out(exp.name, sc.name)
    if exp.deterministic:
        unused = [f"--seeds {seeds}"] if seeds not in (None, 1) else []
        unused += [f"--first-seed {first_seed}"] if first_seed else []
        if unused:
            note = (f"{exp.name} is deterministic (computed values, no training): one run, {' and '.join(unused)} "
                    f"{'does' if len(unused) == 1 else 'do'} not apply")
        seed_list: tuple = (0,)
    else:
        seed_list = tuple(range(first_seed, first_seed + (seeds if seeds is not None else sc.seeds)))
        tuned = sorted({s for pilot in exp.pilots for s in pilot.seeds if s in seed_list})
        if tuned:
            msg = (f"seed(s) {', '.join(map(str, tuned))} of this run are {exp.name}'s pilot seeds (its "
                   f"settings were chosen on them)")
            undeclared = [s for pilot in exp.pilots if not pilot.overlap_note for s in pilot.seeds if s in seed_list]
            if committed_dir(out) and undeclared:  # a pilot with an overlap_note says so in the report itself
                raise ConfigError(f"refusing to write a report under {out}: {msg}; choose --first-seed past them")
            note = f"{msg}: not an independent test"
    cells = tuple(Cell(c, s, os.path.join(out, "cells", c, f"seed{s}"))
                  for c in exp.conditions_for(sc)
                  for s in (seed_list[:1] if c in exp.seed_independent else seed_list))
    return RunPlan(exp, sc, seed_list, out, opts, cells, note, allow_dirty)


def committed_dir(out: str) -> bool:
    """Whether ``out`` lies under a ``reproductions/`` directory (where committed reports live)."""
    parts = os.path.normpath(os.path.abspath(out)).split(os.sep)
    return "reproductions" in parts[:-1]


def check_clean(plan: RunPlan, git: Optional[dict] = None) -> dict:
    """The checkout's ``{"commit", "dirty"}``; a ConfigError when ``plan.out`` is a committed report's place,
    the tree is dirty (or unknown) and ``allow_dirty`` is not set."""
    git = git if git is not None else git_commit()
    if committed_dir(plan.out) and git.get("dirty") is not False and not plan.allow_dirty:
        state = "has uncommitted changes" if git.get("dirty") else "cannot be checked by git"
        raise ConfigError(f"refusing to write a report under {plan.out}: the mwb tree {state}; commit first, "
                          f"or pass --allow-dirty to write one marked as such")
    return git


# ------------------------------------------------------------------------------------------- invoking


def subprocess_invoke(argv: Sequence[str]) -> None:
    """Run ``mwb ARGS`` as ``python -m mwb ARGS``; a failure raises MwbError with the command's last line."""
    argv = _checked(argv)
    proc = subprocess.run([sys.executable, "-m", "mwb", *argv[1:]], stdout=sys.stderr, stderr=subprocess.PIPE,
                          text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise MwbError(f"`{shlex.join(argv)}` failed with exit status {proc.returncode}: {last}")


def _checked(argv: Sequence[str]) -> list[str]:
    argv = [str(a) for a in argv]
    if not argv or argv[0] != "mwb":
        raise ValueError(f"a cell command must start with 'mwb', got {argv[:1]}")
    return argv


# ---------------------------------------------------------------------------------------------- cells


def _prediction_file(out: str, cell: Cell) -> str:
    return os.path.join(out, "predictions", cell.condition, f"seed{cell.seed}.jsonl")


def _cell_commands(plan: RunPlan, cell: Cell) -> list:
    return [_checked(a) for a in plan.exp.cell_commands(cell.condition, cell.seed, plan.scale, cell.dir,
                                                        plan.options)]


def reuse_check(plan: RunPlan, cell: Cell) -> tuple[Optional[CellResult], str]:
    """``(result, "")`` when the cell finished in an earlier run of the same plan, else ``(None, why)``: the
    same experiment, scale, condition and seed, the same recorded command lines and definition hash."""
    try:
        with open(os.path.join(cell.dir, CELL_FILE), encoding="utf-8") as f:
            rec = json.load(f)
    except FileNotFoundError:
        return None, "not run yet" if not os.path.exists(cell.dir) else "unfinished"
    except (OSError, json.JSONDecodeError) as e:
        return None, f"unreadable {CELL_FILE} ({e})"
    if (rec.get("experiment"), rec.get("scale"), rec.get("condition"), rec.get("seed")) != \
            (plan.exp.name, plan.scale.name, cell.condition, cell.seed):
        return None, "made by another experiment, scale, condition or seed"
    if rec.get("commands") != _cell_commands(plan, cell):
        return None, "its recorded command lines differ from the plan's" if "commands" in rec else \
            "it records no command lines (older runner)"
    if rec.get("definition_hash") != plan.exp.definition_hash(plan.scale):
        return None, (f"its definition hash {rec.get('definition_hash')} differs from the plan's "
                      f"{plan.exp.definition_hash(plan.scale)}")
    preds = None
    if rec.get("predictions"):
        try:
            preds = read_predictions(_prediction_file(plan.out, cell))
        except DataError as e:
            return None, f"its predictions cannot be read ({e})"
    return CellResult(rec["metrics"], preds, rec.get("details", {})), ""


def load_finished(plan: RunPlan, cell: Cell) -> Optional[CellResult]:
    """The cell's result if it finished in an earlier run of the same plan (see :func:`reuse_check`)."""
    return reuse_check(plan, cell)[0]


def run_one(plan: RunPlan, cell: Cell, invoke: Invoke) -> CellResult:
    """Run a cell from scratch and mark it finished."""
    if os.path.exists(cell.dir):
        shutil.rmtree(cell.dir)  # a half-written cell: start again
    os.makedirs(cell.dir)
    t0 = time.perf_counter()
    res = plan.exp.run_cell(cell.condition, cell.seed, plan.scale, cell.dir, plan.options, invoke)
    for k, v in res.metrics.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise DataError(f"{plan.exp.name} {cell.label}: metric {k!r} is {v!r}, not a finite number")
    if res.predictions:
        target = _prediction_file(plan.out, cell)
        staging = target + ".d"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(write_predictions(staging, res.predictions), target)
        shutil.rmtree(staging, ignore_errors=True)
    atomic_write_json(os.path.join(cell.dir, CELL_FILE),
                      {"experiment": plan.exp.name, "scale": plan.scale.name, "condition": cell.condition,
                       "seed": cell.seed, "metrics": {k: float(v) for k, v in res.metrics.items()},
                       "predictions": bool(res.predictions), "details": res.details,
                       "commands": _cell_commands(plan, cell),
                       "definition_hash": plan.exp.definition_hash(plan.scale),
                       "wall_s": time.perf_counter() - t0}, allow_nan=False)
    return res


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="cell", file=sys.stderr, disable=not enabled, dynamic_ncols=tty,
                mininterval=0.5 if tty else 30.0)


def run_cells(plan: RunPlan, invoke: Invoke, progress: bool = True) -> tuple[analysis.Cells, dict]:
    """Every cell, finished ones read back; ``(cells, {"ran": n, "reused": n, "cell_wall_s": s})``."""
    results, ran, reused = {}, 0, 0
    with _bar(len(plan.cells), plan.exp.name, progress) as bar:
        for cell in plan.cells:
            bar.set_postfix_str(cell.label)
            res, why = reuse_check(plan, cell)
            if res is None:
                if why != "not run yet":
                    print(f"mwb repro: re-running {cell.label}: {why}", file=sys.stderr)
                res = run_one(plan, cell, invoke)
                ran += 1
            else:
                reused += 1
            results[(cell.condition, cell.seed)] = res
            bar.update(1)
    wall = 0.0
    for cell in plan.cells:
        with open(os.path.join(cell.dir, CELL_FILE), encoding="utf-8") as f:
            wall += float(json.load(f).get("wall_s", 0.0))
    conditions = tuple(dict.fromkeys(c.condition for c in plan.cells))
    return analysis.Cells(conditions, plan.seeds, results), {"ran": ran, "reused": reused, "cell_wall_s": wall}


# ------------------------------------------------------------------------------------------ top level


def commands(plan: RunPlan) -> list[tuple[Cell, list]]:
    """Each cell with the ``mwb`` argv lists it runs (what ``commands.sh`` and ``--dry-run`` show)."""
    return [(cell, _cell_commands(plan, cell)) for cell in plan.cells]


def run_experiment(plan: RunPlan, invoke: Optional[Invoke] = None, progress: bool = True,
                   trackers: tuple = ()) -> dict:
    """Run ``plan`` (finished cells reused), compute the comparisons and verdict, write every output file
    into ``plan.out`` and return the ``results.json`` record. ``invoke`` runs one ``mwb`` argv; without one,
    or when the experiment is not ``in_process``, each command is a ``python -m mwb`` subprocess.
    ``trackers`` (``--log``): the cells and the comparison table also go there (:mod:`.track`)."""
    if invoke is None or not plan.exp.in_process:
        invoke = subprocess_invoke
    git = check_clean(plan)
    plan.exp.check_inputs(plan.scale, plan.options)
    os.makedirs(plan.out, exist_ok=True)
    env = EnvRecorder()
    cells, counts = run_cells(plan, lambda argv: invoke(_checked(argv)), progress)
    exp = plan.exp
    if exp.deterministic:
        comparisons = analysis.deterministic_comparisons(exp.paper_values_for(plan.scale), cells)
    else:
        comparisons = analysis.seeded_comparisons(exp, cells)
    results = {
        "experiment": exp.name,
        "paper": [{"citation": p.citation, "arxiv": p.arxiv, "title": p.title} for p in exp.papers],
        "claim": exp.claim,
        "scale": plan.scale.name,
        "scale_params": plan.scale.params,
        "seeds": list(plan.seeds),
        "deterministic": exp.deterministic,
        "metrics": list(exp.metrics),
        "conditions": analysis.condition_table(exp.metrics, cells),
        "details": {c: [cells.results[(c, s)].details for s in cells.seeds_of(c)]
                    for c in cells.conditions if any(cells.results[(c, s)].details for s in cells.seeds_of(c))},
        "comparisons": comparisons,
        "paper_values": [pv.to_dict() for pv in exp.paper_values_for(plan.scale)],
        "verdict": analysis.verdict(exp, comparisons),
        "verdict_by_metric": analysis.verdict_by_metric(exp, comparisons),
        "verdict_by_part": {} if exp.deterministic else analysis.verdict_by_part(comparisons),
        "statistics": STATISTICS,
        "seed_independent": [c for c in exp.seed_independent if c in cells.conditions],
        "pilots": [asdict(p) for p in exp.pilots],
        "scope": exp.scope(plan.scale),
        "cells": counts,
        "options": plan.options,
    }
    env_record = env.finish()
    env_record["mwb"] = {**git, "allow_dirty": bool(plan.allow_dirty and git.get("dirty") is not False)}
    env_record["definition_hash"] = exp.definition_hash(plan.scale)
    env_record["definition"] = exp.definition(plan.scale)
    report.write_all(plan, results, commands(plan), env_record)
    track_results(trackers, plan.out, results, cells)
    return results


def dry_run(plan: RunPlan) -> str:
    """What a run would do, without doing it: every cell's commands (``commands.sh`` as it would be written)
    and, at ``paper`` scale, ``mwb plan``'s time, memory and energy estimate for the paper's clusters."""
    text = report.render_commands(plan, commands(plan), report.rerun_command(plan))
    specs = plan.exp.plan_specs(plan.scale) if plan.scale.name == "paper" else ()
    if specs:
        text += ("\n# The paper's models on the paper's clusters, as mwb plan estimates them:\n"
                 + "\n".join(paper_plan.describe(s) for s in specs) + "\n")
    return text
