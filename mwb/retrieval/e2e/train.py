"""``mwb finetune e2e-qa``: joint retriever + reader training on the shared training job skeleton.

The launching process resolves everything once (:func:`plan_run`: tokenizer, evidence, the fixed
train / held-out question split, initial retriever weights, reader kind), then every rank runs
:func:`rank_main` through :func:`~mwb.core.training.job.run_job` (this process, ``torchrun`` or ``--nproc N``).
With ``--indexer-ranks R`` the last R ranks become indexers (:mod:`.refresh`) and only the others train.

Per rank: a :class:`~mwb.core.training.trainer.Trainer` over :class:`~.joint.JointSpec`, the retriever
initialised from the ``--retriever`` weights, version 0 of the index embedded before the first step, and a
refresh after every step that is a multiple of ``--refresh-every``. Checkpoints are the trainer's (so
``--resume`` works in any layout); the final and best ones also hold ``retriever/`` (a bi-encoder
checkpoint any retrieval command opens) and ``reader/`` (the reader's own format) for ``mwb eval qa``.
``OUT/results.json`` holds the held-out metrics before and after, ``OUT/predictions.jsonl`` the same per
held-out question (:func:`.evaluate.heldout_eval`).
The retriever is built, trained, evaluated and saved with the start's own scoring (:mod:`.scoring`), so
a run at ``--lr 0`` evaluates exactly as its start.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from mwb.core.training.trainer import Trainer

from .joint import JointSpec, QuestionSet
from .refresh import AsyncRefresh, RefreshConfig, SyncRefresh
from .export import export_parts
from .resume import IndexCarrier, before_metrics, read_index


def joint_trainer(cfg, rcfg, method: str, top_k: int, make_reader: Callable, train_questions: list[dict],
                  evidence, tok, world: int, device="cpu") -> Trainer:
    """A trainer over the joint spec (``trainer.spec``), its training data the question set."""
    spec = JointSpec(cfg, cfg.model.vocab_size, rcfg, method, top_k, make_reader, train_questions, evidence, tok)
    data = QuestionSet(train_questions, tok, rcfg.query_length, cfg.train.seed)
    return Trainer(cfg, spec, data, world_size=world, device=device)


def initialise_retriever(trainer: Trainer, source) -> list[str]:
    """Copy a bi-encoder / BERT source into the (possibly TP-sharded) retriever; refresh fp32 masters."""
    from ..loading import fill_biencoder

    kept = fill_biencoder(trainer.model.retriever, source)
    with torch.no_grad():
        for pc in trainer.optimizer.pieces:
            if not pc.alias:
                pc.master.copy_(pc.param.data.view(-1)[pc.lo:pc.hi].float())
    return kept


def make_refresh(cfg: RefreshConfig, trainer: Trainer, tok, evidence, roles=None):
    if roles is None:
        return SyncRefresh(cfg, tok, evidence, trainer.spec.rcfg, trainer.state, trainer.device)
    return AsyncRefresh(cfg, roles, trainer.state, len(evidence), trainer.model.retriever.dim,
                        trainer.cfg.train.steps)


def run_joint(trainer: Trainer, refresh, callback: Optional[Callable] = None, started: bool = False,
              signals: bool = False):
    """Index version 0 from the current weights (unless ``started``: the caller did ``refresh.start``), train
    with a refresh after each step, close the refresh. Returns the trainer's step history. ``signals``: the
    command's run, whose stop signals save a checkpoint (:func:`~mwb.core.training.driver.train`)."""
    from mwb.core.training.driver import train
    spec = trainer.spec
    if not started:
        spec.index = refresh.start(trainer.model.retriever, trainer.step)

    def after(tr, res, stop):
        new = refresh.after_step(tr.model.retriever, res.step)
        if new is not None:
            spec.index = new
        if callback is not None:
            callback(tr, res, stop)
    try:
        return train(trainer, after)[0] if signals else trainer.run(after)
    finally:
        refresh.close()


def say_rank0(rank: int):
    return (lambda *a, **k: print(*a, **{"file": sys.stderr, **k})) if rank == 0 else (lambda *a, **k: None)


# ------------------------------------------------------------------------------------ the command flow

DEFAULTS = {"train": {"steps": 16, "micro_batch_size": 4, "global_batch_size": 4, "seq_length": 128,
                      "eval_interval": 0, "save_interval": 0},
            "optim": {"lr": 2e-5, "min_lr": 0.0, "warmup_steps": 3}}
DEFAULT_RETRIEVER = "minilm-l6"
HELD_OUT_EVERY = 4  # question i is held out when i % 4 == 3: a fixed split, whatever the seed


@dataclass(frozen=True)
class E2EPlan:
    """What every rank needs, resolved once by the launching process."""
    retriever: str
    reader: Optional[str]          # a reader checkpoint; None: the default for the method
    reader_kind: str               # extractive | fid
    reader_model: dict             # the reader's model config
    reader_cfg: dict               # ReaderConfig
    method: str
    top_k: int
    evidence: str
    questions: str
    tokenizer: str
    rcfg: dict                     # the retriever's settings: the start's own scoring (:mod:`.scoring`)
    refresh: dict
    eval_questions: int = 100      # held-out questions evaluated before and after (evenly spread)
    scoring: str = ""              # the similarity the joint losses train, in words, and whose it is


def split_questions(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, held-out) by position, every 4th question held out (DPR's dev/test labels of the real
    questions name their source split, not ours: none of them is a training split)."""
    held = [r for i, r in enumerate(records) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    return [r for i, r in enumerate(records) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1], held


def answerable(records: list[dict], evidence) -> list[dict]:
    """The questions with an answer somewhere in the evidence, by DPR's has-answer rule (the answer's
    tokens appear contiguously in a passage's tokens). The evidence's tokens are indexed once by bigram
    (and unigram): a one- or two-token answer is one lookup, a longer one is compared only where its first
    two tokens occur (the n-gram sets of every answer length took some 14 s on the bundled questions)."""
    from ..matching import normalize, simple_tokens

    passages = [simple_tokens(normalize(t)) for t in evidence.texts]
    unigrams = {w for p in passages for w in p}
    bigrams: dict[tuple, list] = {}
    for j, p in enumerate(passages):
        for i in range(len(p) - 1):
            bigrams.setdefault((p[i], p[i + 1]), []).append((j, i))

    def found(answer: str) -> bool:
        a = simple_tokens(normalize(answer))
        if len(a) <= 1:
            return bool(a) and a[0] in unigrams
        return any(passages[j][i:i + len(a)] == a for j, i in bigrams.get((a[0], a[1]), ()))
    return [r for r in records if any(found(a) for a in r["answers"])]


def spread(records: list, n: int) -> list:
    """At most ``n`` records, evenly spread over the list (all of them when n ≤ 0 or there are fewer)."""
    if n <= 0 or len(records) <= n:
        return records
    return [records[int(i * len(records) / n)] for i in range(n)]


def plan_run(cfg, retriever: Optional[str], reader: Optional[str], method: str, top_k: int,
             evidence: Optional[str], questions: Optional[str], refresh: RefreshConfig,
             reader_length: int = 192, eval_questions: int = 100):
    """(config with the retriever's model section and its passage length as ``train.seq_length``, plan).

    The retriever keeps the start's scoring (:func:`.scoring.joint_scoring`): its normalisation, score
    scaling and query / passage lengths, which the joint losses then train and the saved retriever records.
    ``--method pipeline`` keeps the retriever fixed, so its index is embedded once."""
    from mwb.core.compose import full_state
    from mwb.core.config import ConfigError, update
    from mwb.core.named_models import local_checkpoint
    from mwb.core.presets import apply_preset

    from ..loading import open_source, with_model
    from ..readers.base import ReaderConfig
    from ..readers.loading import reader_kind
    from ..inputs import BUNDLED_EVIDENCE
    from .joint import METHODS
    from .scoring import joint_scoring

    if method not in METHODS:
        raise ConfigError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
    if not retriever:  # all-MiniLM-L6-v2 as sentence-transformers embeds (mean pooling), else the named BERT
        from ..qa_system import minilm_dir
        retriever = minilm_dir() or DEFAULT_RETRIEVER
    source = open_source(local_checkpoint(retriever))
    cfg = update(with_model(cfg, source), {"model": {"vocab_size": source.vocab_size}})
    tok = cfg.data.tokenizer or source.tokenizer
    if not tok:
        raise ConfigError(f"{source.path} names no tokenizer: pass --tokenizer PATH")
    scoring = joint_scoring(source)
    if scoring.change:
        print(scoring.change, file=sys.stderr)
    rcfg = scoring.rcfg
    cfg = update(cfg, {"train": {"seq_length": rcfg.context_length}})
    if method == "pipeline" and refresh.indexer_ranks:
        raise ConfigError("--method pipeline keeps the retriever fixed, so there is nothing to re-embed: drop "
                          "--indexer-ranks")
    if method == "pipeline" and refresh.every:
        print(f"mwb: --method pipeline keeps the retriever fixed: its index is embedded once (not every "
              f"{refresh.every} steps)", file=sys.stderr)
        refresh = dataclasses.replace(refresh, every=0)
    if reader:
        reader = local_checkpoint(reader)
        rc, rvocab, _, _ = full_state(reader)
        kind = reader_kind(rc.model.arch, reader)
        model_tree = dataclasses.asdict(dataclasses.replace(rc.model, vocab_size=rvocab))
    elif method in ("individual", "pipeline"):  # an extractive BERT reader from the retriever's BERT (else MiniLM's)
        reader = source.path if source.kind != "mwb-biencoder" else local_checkpoint(DEFAULT_RETRIEVER)
        rc, rvocab, _, _ = full_state(reader)
        kind, model_tree = "extractive", dataclasses.asdict(dataclasses.replace(rc.model, vocab_size=rvocab))
    else:  # a tiny T5 FiD reader on the retriever's tokenizer, from random weights
        kind = "fid"
        t5 = apply_preset(type(cfg)(), "t5-tiny").model
        model_tree = dataclasses.asdict(dataclasses.replace(t5, vocab_size=source.vocab_size))
    if model_tree["vocab_size"] != source.vocab_size:
        raise ConfigError(f"the reader's vocabulary ({model_tree['vocab_size']}) differs from the retriever's "
                          f"({source.vocab_size}): joint training reads both with the retriever's tokenizer")
    if model_tree["tie_embeddings"] != cfg.model.tie_embeddings:  # one rule names both parts' output heads
        raise ConfigError(f"the reader has tie_embeddings={model_tree['tie_embeddings']} and the retriever "
                          f"{cfg.model.tie_embeddings}: joint checkpoints store one tying rule for both")
    length = min(reader_length, model_tree["max_position_embeddings"])
    plan = E2EPlan(os.path.abspath(source.path), os.path.abspath(reader) if reader else None, kind, model_tree,
                   dataclasses.asdict(ReaderConfig(seq_length=length)), method, top_k,
                   os.path.abspath(os.path.expanduser(evidence or BUNDLED_EVIDENCE)),
                   os.path.abspath(os.path.expanduser(questions or default_questions())), tok,
                   dataclasses.asdict(rcfg), dataclasses.asdict(refresh), eval_questions, scoring.description)
    for p in (plan.evidence, plan.questions):
        if not os.path.isfile(p):
            from mwb.core.errors import DataError
            raise DataError(f"file not found: {p}")
    return update(cfg, {"data": {"tokenizer": tok}}), plan


def default_questions() -> str:
    """The real answerable questions when the bundle has them, else the bundled Wikipedia questions."""
    from ..inputs import BUNDLED_QUESTIONS, DATA_DIR

    real = os.path.join(DATA_DIR, "real_questions.jsonl.gz")
    return real if os.path.isfile(real) else BUNDLED_QUESTIONS


def reader_factory(plan: E2EPlan, tok, seed: int):
    """``make_reader(state, device, dtype)`` for the joint spec: the plan's reader on this rank's layout."""
    from mwb.core.config import ModelConfig

    from ..readers.base import ReaderConfig
    from ..readers.loading import build_reader_model, fill_reader, wrap

    def make(state, device, dtype):
        mc = ModelConfig(**plan.reader_model)
        model = build_reader_model(plan.reader_kind, mc, state, mc.vocab_size, seed, device, dtype)
        if plan.reader:
            from mwb.core.compose import full_state
            _, vocab, tensors, _ = full_state(plan.reader)
            fill_reader(model, plan.reader_kind, tensors, vocab, mc.tie_embeddings, plan.reader)
        return wrap(plan.reader_kind, model, tok, ReaderConfig(**plan.reader_cfg), state)
    return make


def rank_main(cfg_tree: dict, plan: E2EPlan, out: str, resume: bool) -> None:
    """One rank: an indexer (``--indexer-ranks``) or a trainer; rank 0 writes logs, checkpoints' parts and
    ``OUT/results.json``."""
    from mwb.core.config import to_dict
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.training import driver
    from mwb.core.training.run_dir import open_run
    from mwb.core.training.step_actions import StepActions
    from mwb.evaluation.predictions import write_predictions
    from mwb.evaluation.results import write_results

    from ..biencoder import RetrievalConfig
    from ..loading import open_source
    from ..inputs import read_evidence, read_questions
    from .evaluate import heldout_eval, with_before
    from .refresh import indexer_loop, split_roles

    r = driver.start_rank(cfg_tree)
    cfg, rank, world, device = r.cfg, r.rank, r.world, r.device
    rcfg = RetrievalConfig.from_dict(plan.rcfg)
    refresh = RefreshConfig(**plan.refresh)
    tok = load_tokenizer(plan.tokenizer)
    evidence = read_evidence(plan.evidence)
    roles = split_roles(refresh.indexer_ranks, cfg.parallel.timeout_s) if refresh.indexer_ranks else None
    say = say_rank0(rank)
    if roles is not None and roles.indexer:
        from mwb.core.parallel.state import single_process_state
        from ..loading import fill_biencoder
        from ..biencoder import build_biencoder
        enc = build_biencoder(cfg.model, rcfg, single_process_state(), cfg.model.vocab_size, cfg.train.seed, device)
        fill_biencoder(enc, open_source(plan.retriever))
        indexer_loop(roles, enc, tok, evidence, rcfg, device, refresh.batch_size,
                     say=say_rank0(roles.rank - roles.trainers))
        return
    records = read_questions(plan.questions)
    usable = answerable(records, evidence)
    if not usable:
        from mwb.core.errors import DataError
        raise DataError(f"none of the {len(records)} questions of {plan.questions} has an answer in {plan.evidence}")
    train_q, held_q = split_questions(usable)
    held_q = spread(held_q, plan.eval_questions)
    say(f"mwb: {len(usable)} of {len(records)} questions have an answer in the evidence (DPR's has-answer rule)")
    trainer = joint_trainer(cfg, rcfg, plan.method, plan.top_k, reader_factory(plan, tok, cfg.train.seed),
                            train_q, evidence, tok, roles.trainers if roles else world, device)
    ckpt_root = os.path.join(out, "checkpoints")
    _, latest = driver.resume_latest(trainer, ckpt_root, resume, say)
    if latest is None:
        kept = initialise_retriever(trainer, open_source(plan.retriever))
        say(f"mwb: retriever from {plan.retriever}" + (f" (new: {', '.join(kept)})" if kept else ""))
    say(f"mwb: retriever scoring in the joint losses and the saved retriever: {plan.scoring}")
    say(f"mwb: e2e-qa {plan.method}: {plan.reader_kind} reader ({plan.reader or 'random tiny T5'}), top-{plan.top_k} "
        f"of {len(evidence)} passages, {len(train_q)} training / {len(held_q)} held-out questions, index refresh "
        f"every {refresh.every or 'never'} step(s)" + (f" on {refresh.indexer_ranks} indexer rank(s)"
                                                       if roles else " (synchronous)"))
    refresher = make_refresh(refresh, trainer, tok, evidence, roles)
    carried = read_index(latest) if latest is not None else None
    if carried is not None:  # the version the run was retrieving from when it saved (.resume)
        trainer.spec.index = refresher.current = carried
        say(f"mwb: index version {carried.version} (weights of step {carried.weights_step}) from {latest}")
    else:
        trainer.spec.index = refresher.start(trainer.model.retriever, trainer.step)
    before, before_records = before_metrics(
        out, latest is not None, lambda: heldout_eval(trainer, tok, evidence, held_q, index=trainer.spec.index),
        trainer.state.rank)
    say("mwb: held-out before: " + ", ".join(f"{k} {v:.3f}" for k, v in before.items()))
    logger = open_run(out, cfg, trainer.state.rank, trainer.dims.world_size, start_step=trainer.step,
                      extra={"biencoder": plan.rcfg, "e2e": dataclasses.asdict(plan)})
    extras = {"tokenizer": plan.tokenizer}
    actions = StepActions(logger, ckpt_root, cfg.train, extra_files=extras, say=say, saved=latest)
    carry = IndexCarrier(out, extras, trainer.state.rank)  # every checkpoint holds the index in use
    carry(trainer.spec.index)

    def after_step(tr, res, stop):
        carry(tr.spec.index)
        actions(tr, res, stop)
    t0 = time.time()
    run_joint(trainer, refresher, after_step, started=True, signals=True)
    logger.close()
    seconds = time.time() - t0
    fresh = trainer.spec.index if trainer.spec.index.weights_step == trainer.step else None
    after, after_records = heldout_eval(trainer, tok, evidence, held_q, index=fresh)
    if trainer.state.rank == 0:
        if actions.saved:
            export_parts(actions.saved, cfg, plan, rcfg)
        metrics = {**after, **{f"{k}_before": v for k, v in before.items() if k != "questions"},
                   "train_seconds": seconds}
        path = write_results(out, "e2e-qa", metrics, checkpoint=actions.saved, config=to_dict(cfg),
                             extra={"e2e": dataclasses.asdict(plan)})
        preds = write_predictions(out, with_before(after_records, before_records)) if after_records else None
        say("mwb: held-out after:  " + ", ".join(f"{k} {v:.3f}" for k, v in after.items()))
        say(f"mwb: {trainer.step} steps in {seconds:.1f} s")
        driver.banner(say, out, (("checkpoint", f"{actions.saved} (retriever/, reader/)" if actions.saved else None),
                                 ("results", path),
                                 ("predictions", f"{preds} (one record per held-out question)" if preds else None)))


def train_e2e(cfg, plan: E2EPlan, out: str, nproc: Optional[int], resume: bool) -> None:
    from mwb.core.training.driver import launch_training, no_pipeline, run_tree

    what = "joint retriever-reader training"
    indexers = plan.refresh["indexer_ranks"]
    if not indexers:
        launch_training(cfg, out, nproc, rank_main, lambda: plan, resume, no_pp=what)
        return
    # the last R ranks index: the layout (and the batch split) is that of the training ranks alone
    from mwb.core.checkpoint import resume_dir
    from mwb.core.parallel.dims import LayoutError
    from mwb.core.training.job import world_size
    from mwb.core.training.launch import launch, under_launcher
    from mwb.core.training.trainer import parallel_dims

    world = world_size(nproc)
    if world - indexers < 1:
        raise LayoutError(f"--indexer-ranks {indexers} leaves no training rank of {world}: use --nproc "
                          f"{indexers + 1} or more")
    dims = parallel_dims(cfg, world - indexers)
    if resume:
        resume_dir(os.path.join(out, "checkpoints"))
    no_pipeline(dims, what)
    args = run_tree(cfg, out), plan, out, resume
    if under_launcher():
        rank_main(*args)
    else:
        launch(rank_main, world, *args)
