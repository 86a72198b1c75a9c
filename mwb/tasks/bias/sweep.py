"""``mwb eval bias-sweep``: the bias prompts over a grid of shots × seeds, printed and written as a table.

Prabhumoye et al. study how accuracy moves with the number of examples and with which examples (the seed
of their selection). Every (shots, seed) prompt of the grid is one item per query, so ``--nproc N`` shards
the whole grid; zero shots has no selection, so it is scored once and shown under every seed. Metrics are
``k{K}_s{S}_{metric}`` plus the mean and standard deviation over seeds per K; ``OUT/bias_sweep.md`` holds
the table (accuracy and macro-F1, plain and calibrated).
"""
from __future__ import annotations

import sys

import numpy as np

from mwb.core.config import ConfigError

from ..api.base import Option
from ..api.registry import register
from .task import BiasTask

TABLE_METRICS = ("accuracy", "macro_f1", "calibrated_accuracy", "calibrated_macro_f1")


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--{name} takes comma-separated integers, got '{text}'") from None
    if not values:
        raise ConfigError(f"--{name} is empty")
    return values


@register("bias-sweep")
class BiasSweep(BiasTask):
    description = "bias prompts over shots x seeds: accuracy / macro-F1 table (plain and calibrated)"
    options = {k: v for k, v in BiasTask.options.items() if k not in ("shots", "seed")}
    options.update({
        "shots_grid": Option(str, "0,2,4,8", "Comma-separated numbers of shots."),
        "seeds": Option(str, "1,2,3", "Comma-separated selection seeds."),
        "queries": Option(int, 40, low=0,
                          help="Queries scored per prompt (the first N of the shuffled split; 0 = all)."),
    })

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self.shots = _ints(self.opts["shots_grid"], "shots-grid")
        self.seeds = _ints(self.opts["seeds"], "seeds")

    def load(self, path):
        examples = super().load(path)
        return examples[: self.opts["queries"]] if self.opts["queries"] else examples

    def configs(self):
        return [(k, s) for k in self.shots for s in (self.seeds[:1] if k == 0 else self.seeds)]

    def cell(self, k: int, s: int) -> dict:
        return self.per_config[(k, self.seeds[0] if k == 0 else s)]

    def aggregate(self, results):
        super().aggregate(results)
        out: dict = {}
        for k in self.shots:
            for s in self.seeds:
                out.update({f"k{k}_s{s}_{m}": v for m, v in self.cell(k, s).items() if m in TABLE_METRICS})
            for m in TABLE_METRICS:
                vals = [self.cell(k, s)[m] for s in self.seeds]
                out[f"k{k}_mean_{m}"], out[f"k{k}_std_{m}"] = float(np.mean(vals)), float(np.std(vals))
        out["queries"] = self.per_config[self.configs()[0]]["count"]
        print(sweep_table(self, out), file=sys.stderr, flush=True)
        return out

    def files(self, metrics: dict, records: list[dict], examples: list[dict]) -> dict[str, str]:
        """``bias_sweep.md``: the table of the sweep's metrics."""
        return {"bias_sweep.md": sweep_table(self, metrics)}


def sweep_table(task: BiasSweep, metrics: dict) -> str:
    """Markdown: one row per shots count, a column per seed, then mean ± std, for each table metric."""
    lines = []
    for m in TABLE_METRICS:
        lines += [f"**{m}** ({metrics['queries']} queries, selection {task.opts['selection']})", "",
                  "| shots | " + " | ".join(f"seed {s}" for s in task.seeds) + " | mean ± std |",
                  "|---|" + "---|" * (len(task.seeds) + 1)]
        for k in task.shots:
            cells = " | ".join(f"{metrics[f'k{k}_s{s}_{m}']:.3f}" for s in task.seeds)
            lines.append(f"| {k} | {cells} | {metrics[f'k{k}_mean_{m}']:.3f} ± {metrics[f'k{k}_std_{m}']:.3f} |")
        lines.append("")
    return "\n".join(lines)
