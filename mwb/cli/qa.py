"""``mwb qa synthesize`` and ``mwb qa evaluate-reader``: synthetic QA data (Puri et al. 2020) and the
open-domain test of a reader trained on it (logic in :mod:`mwb.tasks.synthetic_qa`)."""
from __future__ import annotations

import json
import os

import click

from .options import default_out

# What ``mwb qa evaluate-reader`` measures (BM25 + a SQuAD reader, open-domain) under its own name: the
# registered ``qa-reader`` task (``mwb eval qa-reader``, runs/eval-qa-reader-*) is a different measurement.
OPEN_DOMAIN = "qa-evaluate-reader"


@click.group(help="Synthetic question answering: generate SQuAD-format data, evaluate readers open-domain.")
def qa():
    pass


@qa.command(help="Passages → answer candidates → generated questions → roundtrip filter → SQuAD JSON in OUT "
                 "(synthetic.json, unfiltered.json, unfiltered_matched.json, dropped.jsonl, stages.json). With no "
                 "arguments: 60 passages of the bundled Wikipedia evidence, questions from smollm2-135m (2-shot), "
                 "filtered by two "
                 "cross-fitted minilm-l6 readers.")
@click.option("--corpus", default=None, help="Passages: DPR evidence TSV (id, text, title); default the bundled sample.")
@click.option("--out", default=None, help="Output directory (default runs/qa-synthesize-<time>).")
@click.option("--passages", type=click.IntRange(min=0), default=60, show_default=True,
              help="Passages drawn (seeded); 0 = all.")
@click.option("--answers-per-passage", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--generator", default="smollm2-135m", show_default=True,
              help="Question generator: a GPT checkpoint or named model (a question-generation run: --qg-shots 0).")
@click.option("--qg-shots", type=click.IntRange(min=0), default=2, show_default=True,
              help="Demonstrations in the generation prompt.")
@click.option("--context", type=click.Choice(["sentence", "passage"]), default="sentence", show_default=True,
              help="What a question is generated from.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Prompts per generation batch.")
@click.option("--filter-model", default=None, help="Roundtrip QA model: a fine-tuned squad checkpoint "
                                                   "(default: readers trained here on the other fold).")
@click.option("--filter-metric", type=click.Choice(["em", "f1"]), default="f1", show_default=True)
@click.option("--filter-threshold", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@click.option("--filter-base", default="minilm-l6", show_default=True, help="Encoder the roundtrip readers start from.")
@click.option("--filter-epochs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--seq-length", type=click.IntRange(min=1), default=192, show_default=True, help="Reader input length.")
def synthesize(corpus, out, passages, answers_per_passage, seed, generator, qg_shots, context, batch_size,
               filter_model, filter_metric, filter_threshold, filter_base, filter_epochs, seq_length):
    from mwb.retrieval.inputs import BUNDLED_EVIDENCE
    from mwb.tasks.synthetic_qa.pipeline import SynthesisConfig, synthesize as run
    from mwb.tasks.synthetic_qa.roundtrip import FilterRule

    out = out or default_out("qa-synthesize")
    cfg = SynthesisConfig(out=out, corpus=corpus or BUNDLED_EVIDENCE, passages=passages,
                          answers_per_passage=answers_per_passage, seed=seed, generator=generator, qg_shots=qg_shots,
                          context=context, batch_size=batch_size, filter_model=filter_model,
                          filter_rule=FilterRule(filter_metric, filter_threshold), filter_base=filter_base,
                          filter_epochs=filter_epochs, seq_length=seq_length)
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    report = run(cfg, say)
    say(f"mwb: stage counts  {json.dumps(report['counts'])}")
    say(f"mwb: filtered      {os.path.join(out, 'synthetic.json')}  (mwb finetune squad --data it)")
    say(f"mwb: unfiltered    {os.path.join(out, 'unfiltered.json')}")
    say(f"mwb: size-matched  {os.path.join(out, 'unfiltered_matched.json')}  (as many unfiltered pairs as were kept)")
    say(f"mwb: stages        {os.path.join(out, 'stages.json')}")


@qa.command(name="evaluate-reader",
            help="BM25 top-k + an extractive reader (a squad fine-tuning run, or 'untrained') on questions with "
                 "answers over an evidence corpus: EM/F1 into OUT/results.json. Defaults: the 216 bundled real "
                 "questions that name an article, the bundled Wikipedia evidence, the untrained minilm-l6 reader.")
@click.option("--reader", default="untrained", show_default=True, help="squad checkpoint/run, or 'untrained'.")
@click.option("--questions", default=None, help="question<TAB>[answers] TSV or jsonl (default: bundled).")
@click.option("--evidence", default=None, help="DPR evidence TSV (default: bundled Wikipedia sample).")
@click.option("--top-k", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--seq-length", type=click.IntRange(min=1), default=192, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--titled/--all-questions", default=None,
              help="Only questions that name an article title (default with the bundled real questions: 216).")
@click.option("--sample", type=click.IntRange(min=1), default=None, help="A seeded sample of N questions.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of --sample.")
@click.option("--base", default="minilm-l6", show_default=True, help="Encoder of the untrained reader.")
@click.option("--init-seed", type=int, default=1234, show_default=True,
              help="Seed of the untrained reader's fresh span head.")
@click.option("--out", default=None, help=f"Output directory (default runs/{OPEN_DOMAIN}-<time>).")
def evaluate_reader(reader, questions, evidence, top_k, seq_length, limit, titled, sample, seed, base, init_seed,
                    out):
    from mwb.evaluation.predictions import write_predictions
    from mwb.evaluation.results import write_results
    from mwb.tasks.synthetic_qa.open_domain import default_questions, open_domain_eval
    from mwb.retrieval.inputs import BUNDLED_EVIDENCE, BUNDLED_REAL_QUESTIONS

    if titled is None:
        titled = questions is None and default_questions() == BUNDLED_REAL_QUESTIONS
    questions, evidence = questions or default_questions(), evidence or BUNDLED_EVIDENCE
    out = out or default_out(OPEN_DOMAIN)
    click.echo(f"mwb: BM25 top-{top_k} + reader {reader} on {questions}", err=True)
    metrics, per_question = open_domain_eval(reader, questions, evidence, top_k, seq_length, limit, base, titled,
                                             sample, seed, init_seed)
    path = write_results(out, OPEN_DOMAIN, metrics, checkpoint=reader,
                         config={"questions": questions, "evidence": evidence, "top_k": top_k,
                                 "seq_length": seq_length, "base": base, "titled": titled, "sample": sample,
                                 "seed": seed, "limit": limit, "init_seed": init_seed})
    write_predictions(out, per_question)
    for k, v in metrics.items():
        click.echo(f"{OPEN_DOMAIN} {k}: {v:.4g}" if isinstance(v, float) else f"{OPEN_DOMAIN} {k}: {v}")
    click.echo(f"results: {path}")
