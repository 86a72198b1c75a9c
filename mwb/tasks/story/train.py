"""``mwb finetune story``: the four parts of MEGATRON-CNTRL trained in order on ROCStories.

1. RAKE keywords of every sentence (:mod:`.keywords`) and the knowledge candidates of the next sentence's
   keywords (:mod:`.knowledge`, WordNet or a ConceptNet file).
2. The ranker (:mod:`.ranker`): weak labels from the frozen MiniLM (candidate vs gold next sentence), a copy
   of MiniLM trained on them; its loss curve and top-N agreement on dev stories (with the chance level) are
   recorded. It then picks the top-N knowledge of every train/dev example → ``OUT/data/generator/*.jsonl``.
3. The keyword predictor (task ``story-keywords``) and 4. the generator (task ``story-generator``), both
   fine-tuned from the same GPT on the shared trainer (every parallel layout applies: ``--nproc 2 --tp 2``).

``OUT/story.json`` names the parts, so ``mwb generate story`` / ``mwb eval story --checkpoint OUT`` load them;
``OUT/results.json`` holds the ranker numbers and each part's dev metrics.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

from mwb.core.checkpoint import latest_dir
from mwb.core.atomic import atomic_write_text
from mwb.core.config import ConfigError, RunConfig
from mwb.evaluation.results import write_results

from ..api.finetune import finetune
from ..api.setup import REAL_GPT_LORA, Configure, Say, finetune_setup, generative_start, update_tree
from ..api.stages import Stages
from .data import read_stories
from .keyword_predictor import next_sentence_examples
from .knowledge import knowledge_base, knowledge_sentences
from .ranker import Ranker, RankerConfig, agreement, train_ranker, weak_labels

MANIFEST = "story.json"


@dataclass(frozen=True)
class StoryConfig:
    data: str                        # ROCStories CSV / Story Cloze TSV file or directory
    out: str
    checkpoint: str                  # GPT the keyword predictor and the generator start from
    tokenizer: str
    train_stories: int = 200         # 0: every training story
    dev_stories: int = 32
    candidates: int = 16             # knowledge sentences retrieved per example
    top_n: int = 3                   # kept by the ranker, given to the generator
    knowledge: bool = True           # False: the generator ablation without knowledge
    conceptnet: Optional[str] = None
    delexicalize: bool = False
    keyword_epochs: int = 1
    generator_epochs: int = 2
    ranker: RankerConfig = field(default_factory=RankerConfig)


def say(msg: str) -> None:
    print(f"mwb: {msg}", file=sys.stderr, flush=True)


def _examples(scfg: StoryConfig, split: str, limit: int, kb) -> list[dict]:
    stories = read_stories(scfg.data, split, delexicalize=scfg.delexicalize)
    rows = next_sentence_examples(stories[:limit] if limit else stories)
    for r in rows:
        r["candidates"] = knowledge_sentences(kb, r["keywords"], scfg.candidates)
    return rows


def _write_jsonl(rows: list[dict], path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    keep = ("story", "position", "context", "target", "keywords", "knowledge")
    atomic_write_text(path, "".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in rows))


def train_ranker_part(scfg: StoryConfig, train: list[dict], dev: list[dict]) -> tuple[Ranker, dict]:
    rcfg = scfg.ranker
    frozen = Ranker(rcfg.encoder)
    budget = train[: rcfg.steps * rcfg.contexts_per_step * 2]  # the examples training can draw from
    for rows in (budget, dev):
        for r, labels in zip(rows, weak_labels(frozen, [r["target"] for r in rows], [r["candidates"] for r in rows])):
            r["labels"] = labels.tolist()
    before = agreement(frozen, dev, rcfg.top_n)
    say(f"ranker before training: top-{rcfg.top_n} agreement {before['top_n_agreement']:.3f} "
        f"(chance {before['chance']:.3f}) on {before['examples']} dev contexts")
    ranker = Ranker(rcfg.encoder)
    losses = train_ranker(ranker, budget, rcfg, log=say)
    after = agreement(ranker, dev, rcfg.top_n)
    say(f"ranker after training: top-{rcfg.top_n} agreement {after['top_n_agreement']:.3f} "
        f"(chance {after['chance']:.3f})")
    path = ranker.save(os.path.join(scfg.out, "ranker"))
    k = max(1, min(5, len(losses) // 4))
    report = {"ranker_loss_first": sum(losses[:k]) / k, "ranker_loss_last": sum(losses[-k:]) / k,
              "ranker_losses": losses, "ranker_top_n_agreement": after["top_n_agreement"],
              "ranker_top_n_agreement_untrained": before["top_n_agreement"], "ranker_chance": after["chance"],
              "ranker_dev_contexts": after["examples"], "ranker_path": path}
    return ranker, report


def run_story(scfg: StoryConfig, cfg: RunConfig, nproc: Optional[int]) -> dict:
    """Train every part into ``scfg.out``; returns the results written to ``OUT/results.json``. A rerun with the
    same ``OUT`` skips the stages that finished (:class:`~..api.stages.Stages`: the ranked generator data, then
    each GPT part) and resumes a part that was stopped half-way from its newest checkpoint."""
    os.makedirs(scfg.out, exist_ok=True)
    stages = Stages(scfg.out)
    settings = json.loads(json.dumps({"story": dataclasses.asdict(scfg), "run": dataclasses.asdict(cfg)}))
    if stages.finished("settings") not in (None, settings):
        raise ConfigError(f"{scfg.out} holds a `mwb finetune story` run with other settings, whose finished stages "
                          f"would be reused: pass another --out, or the same settings to continue it")
    stages.finish("settings", settings)
    gen_dir = os.path.join(scfg.out, "data", "generator")
    report = stages.finished("data")
    if report is not None:
        say(f"stage 'data' finished earlier (ranker, {gen_dir}): skipped")
    else:
        report = stages.finish("data", _data_stage(scfg, gen_dir))
    common = {"checkpoint": os.path.abspath(scfg.checkpoint), "tokenizer": os.path.abspath(scfg.tokenizer)}
    parts = {}
    for name, task, data, opts, epochs in (
            ("keywords", "story-keywords", scfg.data,
             {"stories": scfg.train_stories, "dev_stories": scfg.dev_stories, "delexicalize": scfg.delexicalize},
             scfg.keyword_epochs),
            ("generator", "story-generator", gen_dir, {"knowledge": scfg.knowledge}, scfg.generator_epochs)):
        if name == "keywords" and not scfg.knowledge:
            continue  # without knowledge the keywords reach nothing: no keyword predictor
        out = os.path.join(scfg.out, name)
        metrics = (stages.finished(name) or {}).get("metrics")
        if metrics is not None:
            say(f"stage '{name}' finished earlier ({out}): skipped")
        else:
            resume = latest_dir(os.path.join(out, "checkpoints")) is not None
            say(f"{'resuming' if resume else 'fine-tuning'} the {name} GPT ({task}) → {out}")
            res = finetune(task, cfg, {**common, "task": task, "task_opts": opts, "data": os.path.abspath(data),
                                       "out": out, "epochs": epochs, "resume": resume}, nproc)
            metrics = stages.finish(name, {"metrics": res.get("metrics", {})})["metrics"]
        parts[name] = os.path.abspath(out)
        report.update({f"{name}_{k}": v for k, v in metrics.items() if isinstance(v, (int, float))})
    manifest = {"keywords": parts.get("keywords"), "generator": parts["generator"],
                "ranker": report["ranker_path"], "knowledge": scfg.knowledge, "top_n": scfg.top_n,
                "candidates": scfg.candidates, "conceptnet": scfg.conceptnet, "data": scfg.data,
                "delexicalize": scfg.delexicalize}
    atomic_write_text(os.path.join(scfg.out, MANIFEST), json.dumps(manifest, indent=1) + "\n")
    metrics = {k: v for k, v in report.items() if isinstance(v, float)}
    write_results(scfg.out, "story", metrics, checkpoint=common["checkpoint"],
                  config={"story": dataclasses.asdict(scfg), "run": dataclasses.asdict(cfg)},
                  extra={"ranker_losses": report.get("ranker_losses"), "parts": manifest})
    return {"metrics": metrics, "parts": manifest}


def _data_stage(scfg: StoryConfig, gen_dir: str) -> dict:
    """Knowledge candidates, the ranker (trained, saved) and the generator's data ranked by it; returns the
    ranker's report."""
    kb = knowledge_base(scfg.conceptnet)
    train = _examples(scfg, "train", scfg.train_stories, kb)
    dev = _examples(scfg, "dev", scfg.dev_stories, kb)
    say(f"{len(train)} train / {len(dev)} dev next-sentence examples, "
        f"{sum(len(r['candidates']) for r in train) / max(len(train), 1):.1f} knowledge candidates each")
    report: dict = {"ranker_path": None}
    if scfg.knowledge:  # the ablation without knowledge needs no ranker
        ranker, report = train_ranker_part(scfg, train, dev)
        for split, rows in (("train", train), ("dev", dev)):
            say(f"ranking knowledge of {len(rows)} {split} examples")
            for r, top in zip(rows, ranker.top([r["context"] for r in rows], [r["candidates"] for r in rows],
                                               scfg.top_n)):
                r["knowledge"] = top
        del ranker
    for split, rows in (("train", train), ("dev", dev)):
        for r in rows:
            r.setdefault("knowledge", [])
        _write_jsonl(rows, os.path.join(gen_dir, f"{split}.jsonl"))
    return report


def story_defaults(pre: RunConfig) -> dict:
    """Fine-tuning defaults of both GPT parts: 256 tokens (knowledge + story so far + next sentence) where the
    pretrained model's positions allow it."""
    m = pre.model
    return {"train": {"seq_length": 256}} if m.position_embedding != "learned" or m.max_position_embeddings >= 256 \
        else {}


# The no-argument scale per start model, each meant to finish within 10 minutes on 2 cores: the tiny GPT trains
# fast, so 200 stories and 2 generator epochs; SmolLM2-135M (LoRA) costs ~70x more per token, so 32 stories (128
# examples: 16 steps of 8 per part, at 160 tokens: knowledge + story so far + next sentence fit) and one epoch each
# — 2.5x the tokens per part of `mwb repro megatron-cntrl --scale cpu`, which takes ~5 min a seed on 2 quiet cores.
TINY_SCALE = {"train_stories": 200, "generator_epochs": 2, "keyword_epochs": 1}
REAL_SCALE = {"train_stories": 32, "generator_epochs": 1, "keyword_epochs": 1}
REAL_TRAIN = {"train": {"seq_length": 160, "global_batch_size": 8, "micro_batch_size": 8}}


def finetune_story(checkpoint: Optional[str], data: str, conceptnet: Optional[str], configure: Configure,
                   tokenizer: Optional[str], out: str, nproc: Optional[int], say: Say, ranker: RankerConfig,
                   **options) -> dict:
    """``mwb finetune story``: the GPT start through the one setup path (``checkpoint``, else
    :func:`~..api.setup.generative_start`'s rule: SmolLM2-135M with LoRA when installed, else the newest ``mwb
    pretrain gpt`` run or a tiny one trained now), then :func:`run_story`. ``options`` are the
    :class:`StoryConfig` fields of the scale and the ablations; a scale field given as None takes the start
    model's default (:data:`TINY_SCALE`, :data:`REAL_SCALE`)."""
    start, real = generative_start(checkpoint)
    scale = REAL_SCALE if real else TINY_SCALE
    options = {**options, **{k: v for k, v in scale.items() if options.get(k) is None}}
    defaults = (lambda pre: update_tree(update_tree(story_defaults(pre), REAL_GPT_LORA),
                                        REAL_TRAIN)) if real else story_defaults
    setup = finetune_setup("mwb finetune story", ("gpt",), start, checkpoint, configure, tokenizer, say,
                           defaults=defaults)
    if checkpoint is None:  # the default start was chosen and said: say the scale that goes with it
        say(f"mwb: story scale: {options['train_stories'] or 'all'} training stories, {options['keyword_epochs']} "
            f"keyword / {options['generator_epochs']} generator epoch(s)" + (", LoRA rank 8" if real else ""))
    scfg = StoryConfig(data=os.path.abspath(data), out=out, checkpoint=setup.checkpoint, tokenizer=setup.tokenizer,
                       conceptnet=os.path.abspath(conceptnet) if conceptnet else None, ranker=ranker, **options)
    return run_story(scfg, setup.cfg, nproc)

