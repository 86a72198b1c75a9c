"""``mwb eval TASK``: any registered task, on one process or sharded over ``--nproc`` data-parallel ranks.

The steps are the task's (``load_model`` → ``load`` → ``build`` → ``run`` → ``aggregate``, implemented by its
objective or by the task itself); :func:`mwb.evaluation.evaluator.evaluate` shards the items over ranks and
puts the results back in order, so the numbers do not depend on the number of ranks. A fine-tuning run
directory means its best checkpoint (``checkpoints/best``, through the one checkpoint resolver), so ``mwb eval TASK --checkpoint RUN`` reproduces
the dev number the run reported. Beside ``results.json``, ``predictions.jsonl`` holds one record per item
(:meth:`~mwb.tasks.api.base.Task.records`) in item order, whose aggregate is each metric the records carry.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.atomic import atomic_write_text
from mwb.core.convert import is_hf_dir
from mwb.core.config import to_dict
from mwb.core.training.launch import init_distributed
from mwb.evaluation.evaluator import evaluate
from mwb.evaluation.predictions import write_predictions
from mwb.evaluation.results import write_results

from .registry import get_task


def evaluate_checkpoint(task, checkpoint: str, data: Optional[str] = None, tokenizer: Optional[str] = None,
                        limit: Optional[int] = None, device=None) -> dict:
    """``{"metrics", "num_examples", "seconds", ...}`` of ``task`` for ``checkpoint`` on this process (one
    data-parallel rank of the launched group, if any), plus the run config under ``"config"`` and the per-item
    records (``predictions.jsonl``'s) under ``"records"``."""
    task.prepare(task.data_path(data))
    cfg, runner = task.load_model(checkpoint, tokenizer, device=device)
    context = task.context_length(runner)
    if "seq_length" in task.options and task.option("seq_length") is None and context is not None:
        # default context: the length an mwb model was trained at; a Hugging Face model's full context
        trained = context if is_hf_dir(checkpoint) else min(cfg.train.seq_length, context)
        task.decide(seq_length=min(trained, 1024))
    report = evaluate(task, runner, data, limit=limit, records=True)
    report["config"] = cfg
    empty = task.objective.empty_outputs(report["records"])
    report["extra"] = {} if empty is None else {"empty_outputs": empty}  # generative: never a silent ""
    return report


def run_eval(task_name: str, task_opts: dict, checkpoint: str, data: Optional[str], out: str,
             tokenizer: Optional[str], limit: Optional[int]) -> dict:
    """Evaluate on this process (one rank of ``--nproc N`` when launched); rank 0 writes results.json and,
    beside it, predictions.jsonl (one record per item, in item order whatever the number of ranks)."""
    rank, world, device = init_distributed()
    task = get_task(task_name)(**task_opts)
    report = evaluate_checkpoint(task, checkpoint, data, tokenizer, limit, device)
    if rank == 0:
        data_path = task.data_path(data)
        report["path"] = write_results(
            out, task.name, report["metrics"], checkpoint=os.path.abspath(checkpoint) if os.path.exists(checkpoint) else checkpoint,
            config=to_dict(report["config"]),
            extra={"data": os.path.abspath(data_path) if os.path.exists(data_path) else data_path,
                   "task_options": task.recorded_options(), "objective": task.objective.name,
                   "num_examples": report["num_examples"], "seconds": report["seconds"], "world_size": world,
                   **report["extra"]})
        report["predictions"] = write_predictions(out, report["records"])
        for name, text in task.files(report["metrics"], report["records"], report["examples"]).items():
            path = os.path.join(out, name)  # e.g. a sweep's table next to results.json; an absolute name as is
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_text(path, text)
    return report
