"""``mwb pretrain ict`` and ``mwb finetune dpr``: bi-encoder training commands (logic in mwb.retrieval.train).

Both take the shared training flags plus the bi-encoder's own settings and run with no arguments on the
bundled Wikipedia sample (``ict``: its passages as blocks; ``dpr``: a small DPR-format JSON made from it).
``--checkpoint`` starts from a Hugging Face BERT directory, an mwb BERT checkpoint or an earlier bi-encoder.
"""
from __future__ import annotations

import os

import click

from .options import build_config, default_out, training_options


def _biencoder_options(fn):
    opts = [
        click.option("--checkpoint", default=None,
                     help="Initial weights: Hugging Face BERT directory, mwb BERT or bi-encoder checkpoint."),
        click.option("--shared/--separate", "shared", default=None,
                     help="One tower for questions and passages, or two (default: separate, or the checkpoint's)."),
        click.option("--pooling", type=click.Choice(["cls", "mean"]), default=None, help="Embedding pooling."),
        click.option("--projection-dim", type=click.IntRange(min=1), default=None,
                     help="Add a linear projection to this size."),
        click.option("--normalize/--no-normalize", default=None, help="L2-normalise embeddings."),
        click.option("--score-scale", type=click.Choice(["none", "sqrt", "temperature"]), default=None,
                     help="Divide scores by nothing, √d, or --temperature."),
        click.option("--temperature", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Score temperature (--score-scale temperature)."),
        click.option("--query-length", type=click.IntRange(min=1), default=None,
                     help="Question tokens (default 32); passages use --seq-length."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _rcfg_flags(kw: dict, **extra) -> dict:
    keys = ("shared", "pooling", "projection_dim", "normalize", "score_scale", "temperature", "query_length")
    out = {k: kw.pop(k) for k in keys if k in kw}
    out.update(extra)
    return {k: v for k, v in out.items() if v is not None}


def _run(kind: str, kw: dict, data, valid, rcfg_flags: dict) -> None:
    from mwb.retrieval.train import base_config, plan_run, train_retriever

    checkpoint = kw.pop("checkpoint", None)
    out = kw.get("out") or default_out(f"{'finetune' if kind == 'dpr' else 'pretrain'}-{kind}")
    resume_cfg = os.path.join(out, "config.yaml")
    if kw.get("resume") and os.path.exists(resume_cfg):
        import yaml

        from mwb.core.config import RunConfig, update
        with open(resume_cfg) as f:
            tree = yaml.safe_load(f) or {}
        saved_rcfg = tree.pop("biencoder", None) or {}
        tree.pop("derived", None)
        base, source = update(RunConfig(), tree), None
        rcfg_flags = {**saved_rcfg, **rcfg_flags}
    else:
        base, source = base_config(kind, checkpoint)
    cfg = build_config(None, kw, base=base)
    cfg, plan = plan_run(kind, cfg, rcfg_flags, data, valid, checkpoint, source)
    train_retriever(cfg, plan, out, kw.get("nproc"), kw.get("resume", False))


def _evidence_options(f):
    """--evidence and --valid, shared by the pretraining commands that read an evidence corpus (ICT, MSS)."""
    f = click.option("--valid", default=None, type=click.Path(),
                     help="Held-out evidence TSV (default: every 20th passage).")(f)
    return click.option("--evidence", default=None, type=click.Path(),
                        help="Evidence TSV (id<TAB>text<TAB>title, DPR's format); default: the bundled sample.")(f)


@click.command(name="ict", help="Pretrain a bi-encoder with the inverse cloze task (ICT) on an evidence corpus.\n\n"
               "A random sentence of each passage is the pseudo-query and the passage (the sentence removed 90% "
               "of the time) its positive; other passages of the batch, across data-parallel ranks, are the "
               "negatives. With no arguments: a tiny BERT bi-encoder on the bundled Wikipedia sample.")
@training_options
@_biencoder_options
@_evidence_options
@click.option("--query-in-block-prob", type=click.FloatRange(0, 1), default=None,
              help="Chance the pseudo-query stays in its block (default 0.1).")
def ict(evidence, valid, query_in_block_prob, **kw):
    flags = _rcfg_flags(kw, query_in_block_prob=query_in_block_prob)
    _run("ict", kw, evidence, valid, flags)


@click.command(name="mss", help="Pretrain a bi-encoder on masked salient spans (MSS) of an evidence corpus.\n\n"
               "A sentence with one name or date (a regex detector, mwb/retrieval/salient_spans.py) masked is the "
               "query and its passage (the sentence removed 90% of the time, as in ICT) the positive; other "
               "passages of the batch are the negatives. With no arguments: minilm-l6 (all-MiniLM-L6-v2) on the "
               "bundled Wikipedia sample; evaluate with `mwb eval qa --checkpoint OUT`.")
@training_options
@_biencoder_options
@_evidence_options
@click.option("--query-in-block-prob", type=click.FloatRange(0, 1), default=None,
              help="Chance the masked sentence stays in its block (default 0.1).")
def mss(evidence, valid, query_in_block_prob, **kw):
    if not kw.get("checkpoint") and not kw.get("resume"):
        from mwb.retrieval.qa_system import minilm_dir

        # the sentence-transformers directory keeps MiniLM's retrieval settings (one tower, mean pooling,
        # cosine); the converted named model is the same weights as a plain BERT ([CLS] pooling)
        kw["checkpoint"] = minilm_dir() or "minilm-l6"
        click.echo(f"mwb: no --checkpoint given: MSS starts from minilm-l6 (all-MiniLM-L6-v2, {kw['checkpoint']})",
                   err=True)
    flags = _rcfg_flags(kw, query_in_block_prob=query_in_block_prob)
    _run("mss", kw, evidence, valid, flags)


@click.command(name="dpr", help="Fine-tune a DPR bi-encoder on DPR's JSON (question, answers, positive_ctxs, "
               "hard_negative_ctxs) with in-batch negatives across data-parallel ranks and hard negatives.\n\n"
               "With no arguments: a tiny BERT bi-encoder on a bundled DPR-format sample. Writes OUT/results.json "
               "with DPR's validation ranks; evaluate retrieval with `mwb eval qa --checkpoint OUT`.")
@training_options
@_biencoder_options
@click.option("--data", default=None, type=click.Path(), help="DPR training JSON (default: the bundled sample).")
@click.option("--valid", default=None, type=click.Path(), help="DPR dev JSON (default: last 10% of --data).")
@click.option("--hard-negatives", type=click.IntRange(min=0), default=None,
              help="Hard negatives per question (default 1).")
def dpr(data, valid, hard_negatives, **kw):
    flags = _rcfg_flags(kw, hard_negatives=hard_negatives)
    _run("dpr", kw, data, valid, flags)


@click.command(name="e2e-qa", help="Train a retriever and a reader jointly for open-domain QA (Sachan et al. 2021): "
               "retrieve the top-k passages from the current index, add the reader's loss and the retriever's "
               "(EMDR2, or the individual top-k marginal likelihood), refresh the evidence index every N steps "
               "(synchronously, or on --indexer-ranks R extra ranks); --method pipeline keeps the retriever fixed "
               "and trains the reader alone (the baseline). The retriever keeps the scoring it was trained with "
               "(normalisation, temperature, query and passage lengths).\n\n"
               "With no arguments: the minilm-l6 bi-encoder, an extractive reader from minilm-l6 (individual) "
               "or a tiny T5 FiD reader (emdr2), the bundled Wikipedia passages and questions (fixed held-out "
               "split). Writes OUT/results.json (held-out top-k and EM before and after), OUT/predictions.jsonl (the "
               "same per held-out question) and OUT/checkpoints/step_N/{retriever,reader}.")
@training_options
@click.option("--retriever", default=None, help="Retriever weights: minilm-l6 (default), a BERT or bi-encoder checkpoint.")
@click.option("--reader", default=None, help="Reader checkpoint (BERT: extractive, T5: FiD, GPT: causal); default per --method.")
@click.option("--method", type=click.Choice(["individual", "emdr2", "pipeline"]), default="individual",
              show_default=True)
@click.option("--top-k", "top_k", type=click.IntRange(min=1), default=4, show_default=True,
              help="Passages retrieved per question.")
@click.option("--evidence", default=None, type=click.Path(), help="Evidence TSV (id<TAB>text<TAB>title).")
@click.option("--questions", default=None, type=click.Path(),
              help="Questions: question<TAB>[\"answer\", ...] or jsonl (records with split=train train; default "
                   "split: every 4th held out), or 'mss': one masked-salient-span question per passage of --evidence, "
                   "written to OUT/mss_questions.jsonl (mwb.retrieval.mss_question_file).")
@click.option("--refresh-every", type=click.IntRange(min=0), default=8, show_default=True,
              help="Re-embed the evidence every N steps (0: never).")
@click.option("--indexer-ranks", type=click.IntRange(min=0), default=0, show_default=True,
              help="Ranks (of --nproc) that only re-embed the evidence, asynchronously.")
@click.option("--reader-length", type=click.IntRange(min=1), default=192, show_default=True,
              help="Reader tokens per passage.")
@click.option("--eval-questions", type=click.IntRange(min=0), default=100, show_default=True,
              help="Held-out questions evaluated before and after training (evenly spread; 0: all).")
def e2e_qa(retriever, reader, method, top_k, evidence, questions, refresh_every, indexer_ranks, reader_length,
           eval_questions, **kw):
    from mwb.core.config import RunConfig, update
    from mwb.core.presets import apply_preset
    from mwb.retrieval.mss_question_file import MSS, mss_question_file
    from mwb.retrieval.e2e.refresh import RefreshConfig
    from mwb.retrieval.e2e.scoring import keep_passage_length
    from mwb.retrieval.e2e.train import DEFAULTS, plan_run, train_e2e

    out = kw.get("out") or default_out("finetune-e2e-qa")
    if questions == MSS:
        questions, n = mss_question_file(evidence, out)
        click.echo(f"mwb: {n} masked-salient-span questions from {evidence or 'the bundled passages'}: {questions}",
                   err=True)
    base = update(apply_preset(RunConfig(), "bert-tiny"), DEFAULTS)
    base, plan = plan_run(base, retriever, reader, method, top_k, evidence, questions,
                          RefreshConfig(every=refresh_every, indexer_ranks=indexer_ranks), reader_length,
                          eval_questions)
    cfg = keep_passage_length(build_config(None, kw, base=base), plan)
    train_e2e(cfg, plan, out, kw.get("nproc"), kw.get("resume", False))
