"""The papers' numbers from NVIDIA's released weights: zero-shot GPT, fine-tuned BERT, BioMegatron.

Why: reproducing a Megatron paper at its own scale starts from the checkpoints NVIDIA released with it, not
from a 345M model pretrained on two cores. ``--checkpoint`` reads those checkpoints as they are published
(a Megatron-LM save directory, a ``.nemo`` archive; converted once into the cache, :mod:`mwb.core.named_models`),
so each experiment here is the paper's evaluation recipe run on the user's copy of the released weights and
the task's official data, with the paper's number beside ours:

``megatron-gpt-zero-shot``   ``megatron_lm_345m``: WikiText-103 perplexity and LAMBADA accuracy, zero-shot
                             (Shoeybi et al. 2019, Table 3, the 355M row);
``megatron-bert-finetune``   ``megatron_bert_345m``: MNLI, QQP, SQuAD 1.1 / 2.0 fine-tuned (Table 5, the
                             336M row; RACE is ``mwb repro race --scale paper --set shape=336m``);
``biomegatron-released``     the BioMegatron 345M ``.nemo`` files: BC5CDR-chem NER, ChemProt relations and
                             BioASQ-7b factoid QA, fine-tuned (Shin et al. 2020).

Each is deterministic in the repro framework's sense: one run per task (condition), and the verdict is
whether our number lies within the declared tolerance of the paper's. Below ``paper`` scale the same commands
run a small installed model on the tasks' bundled samples, which shows that the pipeline works and nothing
about the paper's number. Every paper value states where it was checked; those that could not be checked
against the paper's own table say so in ``where``.
"""
from __future__ import annotations

import json
import os

from mwb.core.errors import DataError

from ..api import LOGGING, CellResult, DataOption, Experiment, Paper, PaperValue, PlanSpec, Scale
from ..registry import register

SHOEYBI = Paper("Shoeybi et al. 2019", "1909.08053",
                "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism")
SHIN = Paper("Shin et al. 2020", "2010.06060", "BioMegatron: Larger Biomedical Domain Language Model")
UNVERIFIED = " (UNVERIFIED: not checked against the paper's table here)"


def _scales(small: str, paper: str, paper_budget: str) -> dict:
    """smoke / cpu / gpu run ``small`` (an installed model) on bundled samples; paper the user's weights."""
    small_desc = (f"{small} (installed offline) on the tasks' bundled samples: the commands end to end, not the "
                  f"paper's model or data")
    return {"smoke": Scale("smoke", small_desc + ", one epoch where a task fine-tunes", budget="not measured",
                           seeds=1, params={"checkpoint": small, "epochs": 1, "limit": 8}),
            "cpu": Scale("cpu", small_desc, budget="not measured", seeds=1,
                         params={"checkpoint": small, "epochs": 1, "limit": None}),
            "gpu": Scale("gpu", small_desc + ", the paper's epochs", budget="not measured", seeds=1,
                         params={"checkpoint": small, "epochs": None, "limit": None}),
            "paper": Scale("paper", paper, budget=paper_budget, seeds=1,
                           params={"checkpoint": "option", "epochs": None, "limit": None})}


class ReleasedWeights(Experiment):
    """One condition per task; a cell is that task's commands on the checkpoint. ``TASK_METRICS`` names the
    metrics each condition reports (the others are not asked of it)."""

    deterministic = True
    TASK_METRICS: dict = {}

    def _start(self, scale: Scale, options: dict) -> str:
        return options["checkpoint"] if scale.name == "paper" else scale.params["checkpoint"]

    def _data(self, scale: Scale, options: dict, key: str) -> list:
        return ["--data", options[key]] if scale.name == "paper" else []

    def _limit(self, scale: Scale) -> list:
        return ["--limit", str(scale.params["limit"])] if scale.params.get("limit") else []

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """The condition's metrics from ``cell_dir/results.json`` (and ``extra/`` for a second evaluation; a
        cell that evaluates nothing itself reports its fine-tuning run's dev metrics, ``finetune/``)."""
        metrics: dict = {}
        top = "" if os.path.isfile(os.path.join(cell_dir, "results.json")) else "finetune"
        for sub, prefix in ((top, ""), ("extra", "extra:")):
            path = os.path.join(cell_dir, sub, "results.json")
            if prefix and not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    found = json.load(f).get("metrics", {})
            except (OSError, json.JSONDecodeError) as e:
                raise DataError(f"{self.name} {condition}: cannot read {path} ({e})") from e
            metrics.update({prefix + k: v for k, v in found.items()})
        out = {}
        for name, source in self.TASK_METRICS[condition]:
            if source not in metrics:
                raise DataError(f"{self.name} {condition}: {cell_dir} reports no {source!r}")
            out[name] = float(metrics[source])
        return CellResult(out)


# ------------------------------------------------------------------------------------- zero-shot GPT

T3 = "Shoeybi et al. 2019, Table 3 (zero-shot), the 355M model: "


@register("megatron-gpt-zero-shot")
class MegatronGptZeroShot(ReleasedWeights):
    papers = (SHOEYBI,)
    claim = ("The released 345M Megatron GPT-2 (megatron_lm_345m) reaches the paper's zero-shot WikiText-103 "
             "perplexity (19.31) and LAMBADA accuracy (45.18%) when mwb evaluates it.")
    conditions = ("wikitext103", "lambada")
    metrics = ("adjusted_perplexity", "accuracy")
    TASK_METRICS = {"wikitext103": (("adjusted_perplexity", "adjusted_perplexity"),),
                    "lambada": (("accuracy", "accuracy"),)}
    paper_values = (
        PaperValue("wikitext103", "adjusted_perplexity", 19.31,
                   T3 + "WikiText-103 test perplexity 19.31, normalised by the original word count; checked "
                   "against the model card of nvidia/megatron-gpt2-345m (an archive on Hugging Face that cites "
                   "the paper), not the paper's PDF", tolerance=0.03, relative=True),
        PaperValue("lambada", "accuracy", 0.4518, T3 + "LAMBADA accuracy 45.18%" + UNVERIFIED,
                   tolerance=0.01),
    )
    scales = _scales("smollm2-135m", "the released megatron_lm_345m (a Megatron-LM save directory with "
                     "gpt2-vocab.json and gpt2-merges.txt beside it) on the WikiText-103 test file and LAMBADA "
                     "(the OpenAI-processed lambada_test.jsonl): sequence 1024, WikiText windows scoring 32 new "
                     "tokens each (Megatron's --overlapping-eval 32), LAMBADA strict (whole last word)",
                     "minutes on one GPU")
    paper_options = {
        "checkpoint": DataOption("the released GPT: megatron_lm_345m unzipped (NGC nvidia/megatron_lm_345m v0.0)",
                                 path=True),
        "wikitext_data": DataOption("WikiText-103's wiki.test.tokens", path=True),
        "lambada_data": DataOption("LAMBADA's lambada_test.jsonl", path=True),
    }

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        start, paper = self._start(scale, options), scale.name == "paper"
        if condition == "wikitext103":
            return [["mwb", "eval", "wikitext", "--checkpoint", start,
                     *self._data(scale, options, "wikitext_data"), *(["--seq-length", "1024"] if paper else []),
                     "--overlap", "32", *self._limit(scale), "--out", cell_dir]]
        return [["mwb", "eval", "lambada", "--checkpoint", start, *self._data(scale, options, "lambada_data"),
                 *(["--seq-length", "1024", "--strict"] if paper else []), *self._limit(scale), "--out", cell_dir]]

    def plan_specs(self, scale: Scale) -> tuple:
        if scale.name != "paper":
            return ()
        return (PlanSpec("Shoeybi et al. 2019 Table 3: the 355M GPT on one A100 80 GB; the estimate is a training "
                         "step's, an upper bound for evaluation (a forward pass is about a third of it)",
                         "gpt-350m", 1, 8, 1024),)

    def scope(self, scale: Scale) -> str:
        if scale.name == "paper":
            return ("The released weights and the official test files, scored the way Megatron-LM's zero-shot "
                    "script does (sliding windows of 1024 with 32 new tokens, word-normalised perplexity; strict "
                    "LAMBADA). It can show whether mwb's conversion and evaluation reproduce the paper's 355M row. "
                    "The LAMBADA value is quoted unverified (see its row).")
        return ("A small installed model on bundled samples: shows the commands and the metrics end to end; the "
                "paper's 355M numbers are context, not a target.")


# ----------------------------------------------------------------------------------- fine-tuned BERT

T5 = "Shoeybi et al. 2019, Table 5 (dev sets), Megatron-336M: "
T5_UNVERIFIED = " (copied from docs/downstream.md's Table 5 without the PDF;" + UNVERIFIED[2:]
# the 336M recipes of docs/downstream.md (Table 6 there; SQuAD: BERT-large's published setting)
BERT_RECIPES = {
    "mnli": ["glue", "--task", "mnli", "--epochs", "10", "--lr", "1e-5", "--global-batch-size", "128",
             "--micro-batch-size", "8", "--seq-length", "512", "--set", "optim.warmup_steps=1994",
             "--set", "optim.weight_decay=0.1"],
    "qqp": ["glue", "--task", "qqp", "--epochs", "12", "--lr", "5e-5", "--global-batch-size", "128",
            "--micro-batch-size", "8", "--seq-length", "512", "--set", "optim.warmup_steps=2217",
            "--set", "optim.weight_decay=0.1"],
    "squad-1.1": ["squad", "--version", "1.1", "--epochs", "2", "--lr", "3e-5", "--global-batch-size", "24",
                  "--micro-batch-size", "4", "--seq-length", "384"],
    "squad-2.0": ["squad", "--version", "2.0", "--epochs", "2", "--lr", "3e-5", "--global-batch-size", "24",
                  "--micro-batch-size", "4", "--seq-length", "384"],
}
BERT_DATA = {"mnli": "mnli_data", "qqp": "qqp_data", "squad-1.1": "squad_data", "squad-2.0": "squad_data"}


def _small_recipe(argv: list, epochs) -> list:
    """A recipe below paper scale: the task flags kept, the schedule shortened, sequences cut to 128."""
    keep, out, i = {"--task", "--version"}, [argv[0]], 1
    while i < len(argv):
        if argv[i] in keep:
            out += argv[i:i + 2]
        i += 2
    return out + ["--epochs", str(epochs or 1), "--global-batch-size", "8", "--micro-batch-size", "8",
                  "--seq-length", "128"]


class FineTuned(ReleasedWeights):
    """Fine-tune the checkpoint on each task, then score its evaluation split (``--out CELL``)."""

    RECIPES: dict = {}
    DATA: dict = {}
    EVAL_SPLIT: dict = {}

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        recipe = self.RECIPES[condition]
        if scale.name != "paper":
            recipe = _small_recipe(recipe, scale.params["epochs"])
        task = recipe[0]
        task_flags = recipe[1:3] if len(recipe) > 2 and recipe[1] in ("--task", "--version") else []
        data = self._data(scale, options, self.DATA[condition])
        ft = os.path.join(cell_dir, "finetune")
        cmds = [["mwb", "finetune", *recipe, "--checkpoint", self._start(scale, options), *data, "--seed",
                 str(seed), "--keep-last", "1", *LOGGING, "--out", ft]]
        for sub, split in self.EVAL_SPLIT.get(condition, ((None, None),)):
            out = os.path.join(cell_dir, sub) if sub else cell_dir
            cmds.append(["mwb", "eval", task, *task_flags, "--checkpoint", ft, *data,
                         *(["--split", split] if split else []), *self._limit(scale), "--out", out])
        return cmds


@register("megatron-bert-finetune")
class MegatronBertFinetune(FineTuned):
    papers = (SHOEYBI,)
    claim = ("The released 345M Megatron BERT (megatron_bert_345m) fine-tuned by mwb reaches the paper's 336M "
             "dev-set numbers on MNLI, QQP and SQuAD 1.1 / 2.0.")
    conditions = ("mnli", "qqp", "squad-1.1", "squad-2.0")
    metrics = ("accuracy", "accuracy_mm", "f1", "em")
    RECIPES, DATA = BERT_RECIPES, BERT_DATA
    # SQuAD: the fine-tuning run's dev scores (SQuAD 2.0's at the null threshold it picked on dev), no eval
    EVAL_SPLIT = {"mnli": ((None, None), ("extra", "dev_mismatched")), "squad-1.1": (), "squad-2.0": ()}
    TASK_METRICS = {"mnli": (("accuracy", "accuracy"), ("accuracy_mm", "extra:accuracy")),
                    "qqp": (("accuracy", "accuracy"),),
                    "squad-1.1": (("f1", "f1"), ("em", "em")), "squad-2.0": (("f1", "f1"), ("em", "em"))}
    paper_values = tuple(
        PaperValue(c, m, v, T5 + w + T5_UNVERIFIED, tolerance=0.01, headline=m in ("accuracy", "f1"))
        for c, m, v, w in (("mnli", "accuracy", 0.897, "MNLI-m 89.7"), ("mnli", "accuracy_mm", 0.900, "MNLI-mm 90.0"),
                           ("qqp", "accuracy", 0.923, "QQP 92.3"), ("squad-1.1", "f1", 0.942, "SQuAD 1.1 F1 94.2"),
                           ("squad-1.1", "em", 0.880, "SQuAD 1.1 EM 88.0"),
                           ("squad-2.0", "f1", 0.881, "SQuAD 2.0 F1 88.1"),
                           ("squad-2.0", "em", 0.848, "SQuAD 2.0 EM 84.8")))
    scales = _scales("minilm-l6", "the released megatron_bert_345m (cased or uncased, a Megatron-LM save directory "
                     "with its vocab.txt) fine-tuned with docs/downstream.md's 336M recipes on the user's GLUE and "
                     "SQuAD files, scored on the dev sets as Table 5 is", "hours on one GPU per task")
    paper_options = {
        "checkpoint": DataOption("the released BERT: megatron_bert_345m unzipped (NGC nvidia/megatron_bert_345m "
                                 "v0.1_uncased or v0.1_cased) with its vocab.txt", path=True),
        "mnli_data": DataOption("GLUE's MNLI directory (train.tsv, dev_matched.tsv, dev_mismatched.tsv)", path=True),
        "qqp_data": DataOption("GLUE's QQP directory (train.tsv, dev.tsv)", path=True),
        "squad_data": DataOption("the SQuAD directory (train/dev v1.1 and v2.0 JSON)", path=True),
    }

    def plan_specs(self, scale: Scale) -> tuple:
        if scale.name != "paper":
            return ()
        return (PlanSpec("Shoeybi et al. 2019 Table 5: MNLI fine-tuning of the 336M BERT (393k pairs × 10 epochs, "
                         "batch 128 × 512 tokens) on one A100 80 GB", "bert-large", 1, 128, 512,
                         train_tokens=10 * 392_702 * 512),)

    def scope(self, scale: Scale) -> str:
        if scale.name == "paper":
            return ("The released 345M BERT fine-tuned once per task with the 336M recipes, dev-set scores beside "
                    "Table 5's 336M row. One seed per task: the paper reports medians over seeds for some tasks, so "
                    "a miss within a point is not a contradiction. Every Table 5 value here is quoted unverified.")
        return "A small installed BERT on bundled samples: the commands end to end, not the paper's numbers."


# --------------------------------------------------------------------------------------- BioMegatron

BIO_RECIPES = {
    "bc5cdr-chem": ["ner", "--epochs", "30", "--lr", "5e-5", "--global-batch-size", "32", "--micro-batch-size",
                    "32", "--seq-length", "128"],
    "chemprot": ["chemprot", "--epochs", "10", "--lr", "3e-5", "--global-batch-size", "32", "--micro-batch-size",
                 "32", "--seq-length", "128"],
    "bioasq-7b": ["bioasq", "--epochs", "3", "--lr", "3e-5", "--global-batch-size", "24", "--micro-batch-size",
                  "8", "--seq-length", "384"],
}
PWC = ("; the value Papers with Code lists for BioMegatron on this benchmark, whose model size is not "
       "stated there" + UNVERIFIED)


@register("biomegatron-released")
class BioMegatronReleased(FineTuned):
    papers = (SHIN,)
    claim = ("The released BioMegatron 345M checkpoints (.nemo) fine-tuned by mwb reach the paper's BC5CDR-chem "
             "NER, ChemProt relation-extraction and BioASQ-7b factoid numbers.")
    conditions = ("bc5cdr-chem", "chemprot", "bioasq-7b")
    metrics = ("f1", "strict_accuracy", "lenient_accuracy", "mrr")
    RECIPES = BIO_RECIPES
    DATA = {"bc5cdr-chem": "ner_data", "chemprot": "chemprot_data", "bioasq-7b": "bioasq_data"}
    EVAL_SPLIT = {c: ((None, "test"),) for c in BIO_RECIPES}
    TASK_METRICS = {"bc5cdr-chem": (("f1", "f1"),), "chemprot": (("f1", "f1"),),
                    "bioasq-7b": (("strict_accuracy", "strict_accuracy"), ("lenient_accuracy", "lenient_accuracy"),
                                  ("mrr", "mrr"))}
    paper_values = (
        PaperValue("bc5cdr-chem", "f1", 0.929, "Shin et al. 2020, Table 1, BC5CDR-chem test F1, BioMegatron 345m "
                   "Bio-vocab-30k cased (as biomegatron.py quotes it)", tolerance=0.01),
        PaperValue("chemprot", "f1", 0.770, "Shin et al. 2020, ChemProt micro F1 77.0" + PWC, tolerance=0.015),
        PaperValue("bioasq-7b", "strict_accuracy", 0.474, "Shin et al. 2020, BioASQ-7b factoid strict accuracy "
                   "47.4" + PWC, tolerance=0.03),
    )
    scales = _scales("minilm-l6", "a released BioMegatron 345M .nemo (NGC nvidia/nemo/biomegatron345m_biovocab_"
                     "{30k,50k}_{cased,uncased}) fine-tuned on the user's BC5CDR-chem, ChemProt and BioASQ-7b files "
                     "and scored on their test splits", "hours on one GPU per task")
    paper_options = {
        "checkpoint": DataOption("a BioMegatron .nemo file, e.g. BioMegatron345m-biovocab-30k-cased.nemo", path=True),
        "ner_data": DataOption("BC5CDR-chem in the BioBERT layout (train.tsv, devel.tsv, test.tsv)", path=True),
        "chemprot_data": DataOption("ChemProt in the BLUE layout (train.tsv, dev.tsv, test.tsv)", path=True),
        "bioasq_data": DataOption("BioASQ-7b factoid in the BioBERT layout (SQuAD JSON + golden file)", path=True),
    }

    def plan_specs(self, scale: Scale) -> tuple:
        if scale.name != "paper":
            return ()
        return (PlanSpec("Shin et al. 2020: BC5CDR-chem NER fine-tuning of the 345M BioMegatron (about 5k "
                         "sentences × 30 epochs, batch 32 × 128 tokens) on one A100 80 GB", "bert-large", 1, 32,
                         128, train_tokens=30 * 4_560 * 128),)

    def scope(self, scale: Scale) -> str:
        if scale.name == "paper":
            return ("A released BioMegatron checkpoint fine-tuned once per task. Which of the four released "
                    "vocabularies matches a paper row matters (Table 1's NER value is the 30k cased one). The "
                    "fine-tuning recipes for ChemProt and BioASQ are mwb's, not the paper's (it does not state them "
                    "in the text available here), and those two paper values are quoted unverified. NeMo BERT "
                    "checkpoints have not been converted by a test yet (only NeMo GPT has).")
        return "A small installed BERT on bundled samples: the commands end to end, not the paper's numbers."
