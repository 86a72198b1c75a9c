"""``mwb qa synthesize``: passages → answer candidates → questions → roundtrip filter → SQuAD JSON.

Why one module: the stages hand records to each other and the counts kept and dropped at each stage are
the pipeline's own report (``OUT/stages.json``, and logged as they happen). Outputs in ``OUT``:

``unfiltered.json``   every well-formed generated pair (SQuAD v1.1), the unfiltered training set
``synthetic.json``    the pairs the roundtrip filter kept (SQuAD v1.1): ``mwb finetune squad --data`` it
``unfiltered_matched.json``  as many pairs as the filter kept, drawn (seeded) from every well-formed pair
                      regardless of the filter: the size-matched control, so a reader trained on it takes as
                      many steps as one trained on ``synthetic.json`` and only the filter differs
``dropped.jsonl``     the pairs it dropped, with the answer the QA model recovered and its score
``stages.json``       counts per stage (``questions_empty``: generations with no text, never kept as a pair),
                      the settings, and seconds per stage: a link to the filter stage's
                      marker ``stages/filter.json`` (one write; it dangles while the filter is unfinished)

A rerun with the same ``OUT`` skips what finished (:class:`~..api.stages.Stages`: markers written last, under
``OUT/stages/``): the generated questions (``records.jsonl`` beside ``unfiltered.json``), each cross-fitted
reader, and the filter. A stage cut short has no marker and runs again; other settings on the same ``OUT``
are refused, since their finished stages would be reused.

The roundtrip QA model is ``filter_model`` (a fine-tuned ``squad`` checkpoint) when given. Without one (no
SQuAD offline), it is trained here on the synthetic pairs themselves, cross-fitted so that no pair is
judged by a reader that saw it: the passages are split in two seeded folds, a ``squad`` reader is
fine-tuned from ``filter_base`` (``minilm-l6``) on each fold's unfiltered pairs, and each fold is filtered
by the reader of the other.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import numpy as np

from mwb.core.atomic import atomic_write_text
from mwb.core.config import ConfigError
from mwb.core.errors import MwbError
from mwb.evaluation.loading import load_language_model
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence

from ..api.stages import Stages
from ..squad.data import read_squad
from .answers import answer_candidates
from .questions import clean_question, generate_questions
from .roundtrip import FilterRule, roundtrip_filter, squad_answerer
from .squad_format import write_squad


@dataclass(frozen=True)
class SynthesisConfig:
    out: str
    corpus: str = BUNDLED_EVIDENCE
    passages: int = 60                 # passages drawn from the corpus (seeded); 0 = all
    answers_per_passage: int = 2
    seed: int = 1
    generator: str = "smollm2-135m"
    qg_shots: int = 2
    context: str = "sentence"          # what questions are conditioned on: sentence or passage
    batch_size: int = 8
    filter_model: Optional[str] = None
    filter_rule: FilterRule = field(default_factory=FilterRule)
    filter_base: str = "minilm-l6"
    filter_epochs: int = 2
    seq_length: int = 192


def pick_passages(n_total: int, n: int, seed: int) -> list[int]:
    if not n or n >= n_total:
        return list(range(n_total))
    return sorted(np.random.default_rng(seed).choice(n_total, size=n, replace=False).tolist())


def make_records(evidence, rows: list[int], cfg: SynthesisConfig, lm, say) -> tuple[list[dict], dict]:
    """Stages 1 and 2: answer candidates and generated questions, as records for :func:`write_squad`."""
    texts = [evidence.texts[r] for r in rows]
    cands = answer_candidates(texts, cfg.answers_per_passage, cfg.seed)
    say(f"mwb: stage 1 answers: {len(cands)} candidate spans from {len(rows)} passages "
        f"({sum(c.kind == 'date' for c in cands)} dates, {sum(c.kind == 'entity' for c in cands)} names)")
    contexts = [c.sentence if cfg.context == "sentence" else texts[c.passage] for c in cands]
    raw = generate_questions(lm, contexts, [c.text for c in cands], cfg.qg_shots, cfg.batch_size)
    records, empty = [], 0
    for i, (c, q) in enumerate(zip(cands, raw)):
        empty += not q.strip()  # the empty-output rule: a generation with no text is a failure, counted
        question = clean_question(q)
        if question is None:
            continue
        row = rows[c.passage]
        records.append({"id": f"syn-{evidence.ids[row]}-{i}", "title": evidence.titles[row] or str(evidence.ids[row]),
                        "context": texts[c.passage], "question": question, "answer": c.text, "answer_start": c.start,
                        "passage": c.passage})
    say(f"mwb: stage 2 questions: {len(records)} well-formed of {len(raw)} generated "
        f"({len(raw) - len(records)} dropped: {empty} empty, the rest with no '?' or under three words)")
    return records, {"passages": len(rows), "answer_candidates": len(cands), "questions_generated": len(raw),
                     "questions_empty": empty, "questions_well_formed": len(records)}


def train_reader(data: str, out: str, cfg: SynthesisConfig, say) -> str:
    """``mwb finetune squad`` from ``cfg.filter_base`` on ``data`` (a child process: its own trainer and log),
    skipped when an earlier run with the same ``OUT`` finished it (its stage marker)."""
    stages, name = Stages(cfg.out), f"reader-{os.path.basename(out)}"
    if stages.finished(name) is not None:
        say(f"mwb: {name} finished in an earlier run: reusing {out}")
        return out
    cmd = [sys.executable, "-m", "mwb", "finetune", "squad", "--checkpoint", cfg.filter_base, "--data", data,
           "--epochs", str(cfg.filter_epochs), "--seq-length", str(cfg.seq_length), "--seed", str(cfg.seed),
           "--out", out]
    say("mwb: " + " ".join(cmd[1:]))
    if subprocess.call(cmd) != 0:
        raise MwbError(f"training the roundtrip reader failed ({' '.join(cmd[2:])})")
    stages.finish(name, {"run": out})
    return out


def cross_fitted_answerer(records: list[dict], cfg: SynthesisConfig, say) -> Callable[[list[dict]], list[str]]:
    """An answer function whose answer for a pair comes from a reader trained on the other fold's passages."""
    passages = sorted({r["passage"] for r in records})
    perm = np.random.default_rng([cfg.seed, 7]).permutation(len(passages))
    fold_of = {passages[i]: int(j % 2) for j, i in enumerate(perm)}
    fold_of_id = {r["id"]: fold_of[r["passage"]] for r in records}
    answerers = {}
    for fold in (0, 1):
        train = [r for r in records if fold_of[r["passage"]] != fold]
        path = write_squad(os.path.join(cfg.out, "filter", f"fold{1 - fold}.json"), train)
        run = train_reader(path, os.path.join(cfg.out, "filter", f"reader-fold{1 - fold}"), cfg, say)
        answerers[fold] = squad_answerer(run, cfg.seq_length)

    def answer(examples: list[dict]) -> list[str]:
        out = {}
        for fold in (0, 1):
            part = [e for e in examples if fold_of_id[e["id"]] == fold]
            out.update(zip([e["id"] for e in part], answerers[fold](part) if part else []))
        return [out[e["id"]] for e in examples]
    return answer


def synthesize(cfg: SynthesisConfig, say=print) -> dict:
    """Run every stage; returns what ``stages.json`` holds."""
    if cfg.context not in ("sentence", "passage"):
        raise MwbError(f"--context must be sentence or passage, not '{cfg.context}'")
    os.makedirs(cfg.out, exist_ok=True)
    stages = Stages(cfg.out)
    settings = json.loads(json.dumps(asdict(cfg)))
    if stages.finished("settings") not in (None, settings):
        raise ConfigError(f"{cfg.out} holds a `mwb qa synthesize` run with other settings, whose finished stages "
                          f"would be reused: pass another --out, or the same settings to continue it")
    stages.finish("settings", settings)
    done = stages.finished("filter")
    if done is not None:
        say(f"mwb: every stage finished in an earlier run: {cfg.out}")
        return done
    unfiltered, records_path = os.path.join(cfg.out, "unfiltered.json"), os.path.join(cfg.out, "records.jsonl")
    questions = stages.finished("questions")
    if questions is None:
        t = time.perf_counter()
        evidence = read_evidence(cfg.corpus)
        rows = pick_passages(len(evidence), cfg.passages, cfg.seed)
        _, lm = load_language_model(cfg.generator)
        records, counts = make_records(evidence, rows, cfg, lm, say)
        del lm
        write_squad(unfiltered, records)
        atomic_write_text(records_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        questions = stages.finish("questions", {"counts": counts, "seconds": round(time.perf_counter() - t, 1)})
    else:
        with open(records_path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        say(f"mwb: stages 1-2 finished in an earlier run: {len(records)} questions from {records_path}")
    counts, seconds = dict(questions["counts"]), {"answers_and_questions": questions["seconds"]}
    t = time.perf_counter()
    answer = squad_answerer(cfg.filter_model, cfg.seq_length) if cfg.filter_model else \
        cross_fitted_answerer(records, cfg, say)
    kept, dropped = roundtrip_filter(read_squad(unfiltered), answer, cfg.filter_rule)
    seconds["roundtrip"] = round(time.perf_counter() - t, 1)
    kept_ids = {e["id"] for e in kept}
    write_squad(os.path.join(cfg.out, "synthetic.json"), [r for r in records if r["id"] in kept_ids])
    write_squad(os.path.join(cfg.out, "unfiltered_matched.json"), matched_sample(records, len(kept), cfg.seed))
    atomic_write_text(os.path.join(cfg.out, "dropped.jsonl"), "".join(
        json.dumps({k: e[k] for k in ("id", "question", "answers", "recovered", "roundtrip_score")}) + "\n"
        for e in dropped))
    counts.update(roundtrip_kept=len(kept), roundtrip_dropped=len(dropped))
    say(f"mwb: stage 3 roundtrip ({cfg.filter_rule.metric} >= {cfg.filter_rule.threshold}): kept {len(kept)}, "
        f"dropped {len(dropped)} of {len(records)}")
    report = {"counts": counts, "seconds": seconds,
              "config": {**asdict(cfg), "filter_rule": asdict(cfg.filter_rule)}}
    report = stages.finish("filter", json.loads(json.dumps(report)))
    link_report(cfg.out)
    return report


def matched_sample(records: list[dict], n: int, seed: int) -> list[dict]:
    """``n`` of ``records`` drawn without replacement with a generator of its own (``[seed, 11]``), in file
    order: the unfiltered pairs at the filtered set's size."""
    keep = np.random.default_rng([seed, 11]).choice(len(records), size=min(n, len(records)), replace=False)
    return [records[i] for i in sorted(keep.tolist())]


def link_report(out: str) -> None:
    """``OUT/stages.json`` → ``stages/filter.json``: the filter marker is the report, written once; the link is
    made under a temporary name and renamed over any older ``stages.json``."""
    path = os.path.join(out, "stages.json")
    if os.path.islink(path) and os.readlink(path) == os.path.join("stages", "filter.json"):
        return
    tmp = path + ".link"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(os.path.join("stages", "filter.json"), tmp)
    os.replace(tmp, path)
