"""The bert-gpt-scaling cpu scale's fine-tuning-lr pilot, per size and task, at a seed no report uses.

Why: the cpu report on 1079964 fine-tuned every size at one lr (1e-3). There the large BERT (4 × 256, post-norm)
never left the uniform BBC loss (ln 5) and ended at the majority class (test accuracy 0.229 at seed 0), so its
comparison with the small one measured which size tolerates that lr, not what size buys. The paper, too, tunes
the fine-tuning lr per size (Table 6). So each size now fine-tunes each task at its own lr, chosen on dev by the
rule below, written before this pilot ran.

Rule: at pilot seed 99 (report seeds are 0-4; 97 and 98 were earlier recipes' pretraining pilots, 99 the third
recipe's), each size pretrains with the cpu scale's own command (2,000 steps of 16 × 128 tokens at the size's
piloted pretraining lr), then fine-tunes BBC News and WNUT-16 with the scale's own commands at each candidate lr
(1e-4, 3e-4, 1e-3, 3e-3; sample, epochs, batch, warm-up and sequence unchanged). For each size and task the lr
whose last-epoch dev metric is highest wins (BBC: dev accuracy over the 221 dev articles; WNUT-16: dev entity
F1); a run without a finite dev metric is out, and a tie within 0.005 goes to the smaller lr. Only dev splits
are read: no test item is scored, and no number of another size enters a size's choice.

    python -m mwb.repro.experiments.bert_gpt_scaling_ft_pilot --out DIR

prints one line per size, task and candidate, then the choices; ``BertGptScaling.pilots`` records what it printed
and ``bert_gpt_scaling_scales.CPU_FT_LR`` the chosen lrs.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil

from mwb.core.atomic import atomic_write_json

from ..registry import get_experiment
from ..runner import subprocess_invoke
from .biomegatron_scales import last_valid_value

CANDIDATES = (1e-4, 3e-4, 1e-3, 3e-3)
PILOT_SEED = 99
TIE = 0.005
# task key in the scale's ft_lr -> (the `mwb finetune` task, its --out name in the cell, the dev metric)
TASKS = {"bbc": ("bbc-topic", "bbc", "accuracy"), "wnut": ("ner", "wnut", "f1")}


def choose(scores: dict):
    """The rule on ``{lr: last-epoch dev metric}``: the highest finite one, ties within ``TIE`` to the smaller
    lr; None when no run gave a finite metric."""
    finite = {lr: v for lr, v in scores.items() if v is not None and math.isfinite(v)}
    if not finite:
        return None
    best = max(finite.values())
    return min(lr for lr, v in finite.items() if v >= best - TIE)


def _with_ft_lr(scale, lr: float):
    """The scale with every size and task fine-tuning at ``lr``."""
    return dataclasses.replace(scale, params={**scale.params, "ft_lr": lr})


def _retarget(argv: list, out: str) -> list:
    argv = list(argv)
    argv[argv.index("--out") + 1] = out
    return argv


def run_pilot(out: str, invoke=subprocess_invoke) -> dict:
    exp = get_experiment("bert-gpt-scaling")
    scale = exp.scales["cpu"]
    rows, chosen = [], {task: {} for task in TASKS}
    for size in exp.conditions:
        cell = os.path.join(out, size)
        pretrain = exp.cell_commands(size, PILOT_SEED, scale, cell, {})[0]
        assert pretrain[1:3] == ["pretrain", "bert"], pretrain
        invoke(pretrain)
        for task, (name, sub, metric) in TASKS.items():
            scores = {}
            for lr in CANDIDATES:
                cmds = exp.cell_commands(size, PILOT_SEED, _with_ft_lr(scale, lr), cell, {})
                (argv,) = [c for c in cmds if c[1:3] == ["finetune", name]]
                run_dir = os.path.join(cell, f"{sub}-lr{lr:g}")
                invoke(_retarget(argv, run_dir))
                value = last_valid_value(os.path.join(run_dir, "metrics.jsonl"), metric)
                shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)
                scores[lr] = None if value is None else float(value)
                rows.append({"size": size, "task": task, "lr": lr, "seed": PILOT_SEED, f"dev_{metric}": scores[lr]})
            chosen[task][size] = choose(scores)
        shutil.rmtree(os.path.join(cell, "pretrain", "checkpoints"), ignore_errors=True)
    result = {"rows": rows, "chosen": chosen, "seed": PILOT_SEED, "candidates": list(CANDIDATES)}
    atomic_write_json(os.path.join(out, "ft_pilot.json"), result)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    result = run_pilot(ap.parse_args().out)
    for r in result["rows"]:
        key = next(k for k in r if k.startswith("dev_"))
        value = "none" if r[key] is None else f"{r[key]:.4f}"
        print(f"{r['size']} {r['task']} lr {r['lr']:g} seed {r['seed']}: {key} {value}")
    for task, by_size in result["chosen"].items():
        print(f"{task}: " + ", ".join(f"{size} {lr:g}" if lr is not None else f"{size} none"
                                      for size, lr in by_size.items()))


if __name__ == "__main__":
    main()
