"""``bias-prompts``: do more examples in the prompt, and content-free calibration, help an LM detect offensive posts?

Prabhumoye et al. 2021 prompt a pretrained GPT with an instruction, a few labelled posts and the query, and
read the answer off the label words' likelihoods; their abstract reports that the largest (530B) model detects
social bias best and that a few class-balanced exemplars suffice. The claim tested here is the method's premise,
in the paper's direction: the few-shot prompt with calibration classifies better than the zero-shot prompt.

Conditions: ``k0``, ``k2``, ``k4``, ``k8`` (that many examples, the plain label-word argmax) and the same with
``-cal`` (Zhao et al.'s content-free calibration of the same prompt: the label probabilities divided by those of
``N/A``, ``[MASK]`` and the empty query). One ``mwb eval bias --shots K --seed S`` run scores both: its
``predictions.jsonl`` holds, per query, the plain and the calibrated outcome. So a plain condition and its
``-cal`` twin list the same command and read the same run directory (``OUT/runs/k{K}-seed{S}``): the command
runs once per experiment output (:func:`run_once`), and the second condition reads its calibrated half. Zero
shots has no examples to choose, so its run (``OUT/runs/k0``, ``--seed 0``) serves every seed. ``commands.sh``
lists each cell's command as it stands, so a shared one appears under each cell it serves (rerunning it rewrites
the same files).

Seeds drive the choice of the examples (``--selection balanced``: k/2 of each label, seeded; the paper picks
class-balanced exemplars). Metrics per query: ``accuracy`` (0/1) and ``macro_f1`` (the item's confusion cell, so
the paired bootstrap and permutation test recompute macro-F1 per resample); ``positive_rate`` shows how often the
model says "yes". Headline: ``k8-cal`` against ``k0`` on macro-F1 (paired per query over seeds, a permutation
test recomputing macro-F1). Why macro-F1 and not accuracy: the test queries are balanced (90 of 178 offensive),
so a model that answers "no" to every post scores the base rate on accuracy (0.494) and a constant classifier's
macro-F1 (about 0.33) on this one; accuracy, the old headline, sat at the base rate by construction whenever
SmolLM2 said "no" throughout, and its difference measured how the answers' rate moved, not detection.
Accuracy is declared beside it.
"""
from __future__ import annotations

import json
import os
import re
import shutil

from mwb.core.atomic import atomic_write_json
from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.evaluation.predictions import FILENAME as PREDICTIONS_FILE
from mwb.evaluation.predictions import read_predictions

from ..api import LOGGING, CellResult, Comparison, DataOption, Experiment, Paper, Scale
from ..registry import register
from . import bias_prompts_report as bpr

PRABHUMOYE = Paper("Prabhumoye et al. 2021", "2112.07868",
                   "Few-shot Instruction Prompts for Pretrained Language Models to Detect Social Biases")
SHOTS = (0, 2, 4, 8)
CAL = "-cal"
CONDITIONS = tuple(f"k{k}" for k in SHOTS) + tuple(f"k{k}{CAL}" for k in SHOTS)
METRICS = ("accuracy", "macro_f1", "positive_rate")
SELECTIONS = ("random", "balanced", "nearest")
STAMP = ".command.json"  # beside a shared run directory: the argv that finished writing it

BUNDLED = "the bundled pool (mwb/tasks/bias: RealToxicityPrompts prompts a profanity classifier scores offensive " \
          "against BBC News and Wikipedia sentences; 174 pool posts, 178 test queries of which 90 offensive)"
SCALES = {
    "smoke": Scale("smoke", "a 2-layer GPT pretrained for 4 steps (one run shared by every cell) prompting the first "
                   "16 bundled test queries: checks the pipeline, not the result", budget="≤ 2 min on 2 cores",
                   seeds=2, params={"model": "tiny", "limit": 16, "selection": "balanced", "data": None}),
    "cpu": Scale("cpu", f"SmolLM2-135M-Instruct on all 178 test queries of {BUNDLED}; balanced example selection, "
                 "3 seeds (10 distinct evaluations: zero shots once, 2/4/8 shots per seed)",
                 budget="≈ 4 min on 2 quiet cores (≈ 20 CPU-s per evaluation)", seeds=3,
                 params={"model": "smollm2-135m", "limit": None, "selection": "balanced", "data": None}),
    "gpu": Scale("gpu", "the cpu scale's model and queries over 10 seeds on one GPU: SmolLM2-135M is the only "
                 "instruction LM installed offline, so a GPU buys seeds, not size", budget="≤ 5 min on one H200",
                 seeds=10, params={"model": "smollm2-135m", "limit": None, "selection": "balanced", "data": None}),
    "paper": Scale("paper", "the user's SBIC CSVs and GPT checkpoint (the paper's: Megatron GPT up to MT-NLG 530B), "
                   "offensiveYN, class-balanced exemplars, 3 seeds", budget="hours on a multi-GPU node per model",
                   seeds=3, params={"model": "option", "limit": "option", "selection": "option", "data": "option"}),
}


def parse(condition: str) -> tuple[int, bool]:
    """``k8-cal`` → (8, True)."""
    m = re.fullmatch(r"k(\d+)(-cal)?", condition)
    if not m:
        raise ValueError(f"bias-prompts: not a condition: {condition!r}")
    return int(m.group(1)), bool(m.group(2))


def run_name(shots: int, seed: int) -> str:
    """The shared run a (shots, seed) cell reads: zero shots has no examples, so one run for every seed."""
    return "k0" if shots == 0 else f"k{shots}-seed{seed}"


def experiment_dir(cell_dir: str) -> str:
    """OUT from a cell directory ``OUT/cells/<condition>/seed<k>`` (the runner's layout)."""
    cells = os.path.dirname(os.path.dirname(os.path.normpath(cell_dir)))
    if os.path.basename(cells) != "cells":
        raise ValueError(f"bias-prompts: {cell_dir} is not OUT/cells/<condition>/seed<k>")
    return os.path.dirname(cells)


def run_dir(cell_dir: str, condition: str, seed: int) -> str:
    shots, _ = parse(condition)
    return os.path.join(experiment_dir(cell_dir), "runs", run_name(shots, seed))


def run_once(argv: list, invoke) -> bool:
    """Run ``argv`` unless its ``--out`` already holds the finished output of this exact command (its argv
    stamped beside it after success); return whether it ran. A half-written run is deleted and run again."""
    out = argv[argv.index("--out") + 1]
    stamp = out.rstrip(os.sep) + STAMP
    try:
        with open(stamp, encoding="utf-8") as f:
            if json.load(f) == list(argv) and os.path.isdir(out):
                return False
    except (OSError, json.JSONDecodeError):
        pass
    if os.path.exists(out):
        shutil.rmtree(out)
    invoke(argv)
    atomic_write_json(stamp, list(argv), indent=None)
    return True


def condition_records(records: list[dict], calibrated: bool) -> list[dict]:
    """One condition's view of a run's records: the plain or the calibrated prediction and its outcomes under
    the plain metric names (``accuracy``, ``macro_f1``, ``positive_rate``), paired by the query's id."""
    pre = "calibrated_" if calibrated else ""
    out = []
    for r in records:
        for key in (f"{pre}accuracy", f"{pre}macro_f1", f"{pre}positive_rate"):
            if key not in r:
                raise DataError(f"bias-prompts: a record of mwb eval bias has no {key!r} (id {r.get('id')!r})")
        out.append({"id": r["id"], "prediction": int(r[f"{pre}positive_rate"]), "gold": r["gold"],
                    "category": r.get("category"), "calibrated": calibrated, "p": r.get("p"), "p_cf": r.get("p_cf"),
                    "accuracy": r[f"{pre}accuracy"], "macro_f1": r[f"{pre}macro_f1"],
                    "positive_rate": r[f"{pre}positive_rate"]})
    return out


@register("bias-prompts")
class BiasPrompts(Experiment):
    papers = (PRABHUMOYE,)
    claim = ("Few-shot instruction prompts detect offensive posts better with labelled examples and content-free "
             "calibration than without: 8 calibrated shots reach a higher macro-F1 (both classes' F1, so a "
             "constant answer cannot score well) than the zero-shot prompt (Prabhumoye et al.'s method: an "
             "instruction, class-balanced exemplars and the query; their abstract reports that large LMs so "
             "prompted detect fine-grained biases about as accurately as "
             "fine-tuned models, the 530B model best).")
    conditions = CONDITIONS
    # zero shots has no examples to choose: one run serves every seed, and it enters the test as one run
    seed_independent = ("k0", f"k0{CAL}")
    metrics = METRICS
    comparisons = (
        Comparison("k0", f"k8{CAL}", "macro_f1", "greater", headline=True),
        Comparison("k0", f"k8{CAL}", "accuracy", "greater"),
        Comparison("k0", "k8", "accuracy", "greater"),  # shots alone, plain
        Comparison("k0", "k8", "macro_f1", "greater"),
        Comparison("k8", f"k8{CAL}", "accuracy", "greater"),  # calibration alone, at 8 shots
        Comparison("k8", f"k8{CAL}", "macro_f1", "greater"),
        Comparison(f"k0{CAL}", f"k8{CAL}", "macro_f1", "greater"),  # shots, calibrated
    )
    paper_values = ()  # see bias_prompts_report.PAPER_NOTE: no per-shot number of the paper could be verified
    scales = SCALES
    paper_options = {
        "sbic": DataOption("the SBIC directory holding SBIC.v2.{trn,dev,tst}.csv (or SBIC.v2.agg.*.csv): the train "
                           "split is the exemplar pool, --set split=... the queries"),
        "checkpoint": DataOption("the GPT to prompt: an mwb checkpoint or Hugging Face directory (the paper's: "
                                 "Megatron GPT models up to MT-NLG 530B)"),
        "tokenizer": DataOption("that checkpoint's tokenizer, or 'own' for the one it carries", default="own"),
        "split": DataOption("the SBIC split whose posts are classified: test or dev", default="test"),
        "attribute": DataOption("the SBIC column: offensiveYN, intentYN, sexYN or whoTarget", default="offensiveYN"),
        "selection": DataOption("exemplar selection: balanced (seeded, class-balanced), random, or nearest "
                                "(MiniLM neighbours; not seeded, so the seeds coincide)", default="balanced"),
        "queries": DataOption("classify only the first N posts of the split (0: all)", default="0"),
    }

    def check_options(self, scale: Scale, options: dict) -> dict:
        out = super().check_options(scale, options)
        if scale.name != "paper":
            return out
        if out["selection"] not in SELECTIONS:
            raise ConfigError(f"bias-prompts: --set selection={out['selection']} is not one of {', '.join(SELECTIONS)}")
        if out["split"] not in ("test", "dev"):
            raise ConfigError(f"bias-prompts: --set split={out['split']} is not test or dev")
        if not out["queries"].isdigit():
            raise ConfigError(f"bias-prompts: --set queries={out['queries']} is not a whole number")
        return out

    def plan_specs(self, scale: Scale) -> tuple:
        return bpr.plan_specs() if scale.name == "paper" else ()

    # ------------------------------------------------------------------------------------------ one cell

    def _model(self, scale: Scale, cell_dir: str, options: dict) -> tuple[str, list, list]:
        """(checkpoint, extra eval flags, commands that make the model)."""
        model = scale.params["model"]
        if model == "option":
            tok = options["tokenizer"]
            return options["checkpoint"], ([] if tok == "own" else ["--tokenizer", tok]), []
        if model != "tiny":
            return model, [], []
        start = os.path.join(experiment_dir(cell_dir), "runs", "start")
        return start, [], [["mwb", "pretrain", "gpt", "--preset", "gpt-tiny", "--set", "model.num_layers=2",
                            "--set", "model.max_position_embeddings=1024", "--steps", "4", "--global-batch-size",
                            "4", "--micro-batch-size", "4", "--seq-length", "64", "--eval-interval", "0",
                            "--seed", "1234", *LOGGING, "--out", start]]

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        p = scale.params
        shots, _ = parse(condition)
        checkpoint, flags, cmds = self._model(scale, cell_dir, options)
        if scale.name == "paper":
            selection, limit = options["selection"], int(options["queries"])
            data = ["--data", options["sbic"], "--split", options["split"], "--attribute", options["attribute"]]
        else:
            selection, limit, data = p["selection"], p["limit"], []
        cmds.append(["mwb", "eval", "bias", "--checkpoint", checkpoint, *flags, *data, "--shots", str(shots),
                     "--seed", str(0 if shots == 0 else seed), "--selection", selection,
                     *(["--limit", str(limit)] if limit else []), "--out", run_dir(cell_dir, condition, seed)])
        return cmds

    def run_cell(self, condition, seed, scale, cell_dir, options, invoke) -> CellResult:
        ran = [run_once(argv, invoke) for argv in self.cell_commands(condition, seed, scale, cell_dir, options)]
        res = self.read_cell(condition, seed, scale, cell_dir)
        res.details["evaluation_ran_in_this_cell"] = ran[-1]
        return res

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """The run's ``results.json`` metrics (plain or ``calibrated_``) and its records, seen as this condition."""
        shots, calibrated = parse(condition)
        run = run_dir(cell_dir, condition, seed)
        path = os.path.join(run, "results.json")
        try:
            with open(path, encoding="utf-8") as f:
                found = json.load(f)["metrics"]
        except (OSError, json.JSONDecodeError, KeyError) as e:
            raise DataError(f"bias-prompts {condition} seed {seed}: cannot read {path} ({e})") from e
        pre = "calibrated_" if calibrated else ""
        missing = [m for m in METRICS if pre + m not in found]
        if missing:
            raise DataError(f"{path} has no metric {pre + missing[0]!r}")
        metrics = {m: float(found[pre + m]) for m in METRICS}
        records = condition_records(read_predictions(os.path.join(run, PREDICTIONS_FILE)), calibrated)
        return CellResult(metrics, records, {"run": os.path.relpath(run, experiment_dir(cell_dir)),
                                             "queries": int(found.get("count", len(records)))})

    # ---------------------------------------------------------------------------------------- reporting

    def scope(self, scale: Scale) -> str:
        return bpr.scope(scale)

    def plot(self, results: dict, path: str) -> bool:
        bpr.plot(results, path, SHOTS, CAL)
        return True
