"""The bert-gpt-scaling cpu scale's pretraining-lr pilot, per size, at a seed no report uses, run before the report.

Rule, written before the pilot ran: each size pretrains with the cpu scale's own command (2,000 steps of 16 × 128
tokens; 600 in the second recipe, piloted at seed 98) at each of the candidate lrs 5e-4, 1e-3 and 2e-3 and pilot
seed 99; the size takes the lr whose last-step
dev MLM loss (``mwb pretrain``'s validation at its last step, over the scale's ``pt_eval_steps`` batches of the
bundled corpus's held-out split), averaged over the pilot seeds, is lowest; a run whose loss is not finite is
out, and a tie within 0.01 nats goes to the smaller lr. The rule reads no fine-tuning number, so the headline
(BBC accuracy of large against small) cannot steer it. The pilot also measures the masked LM's unigram plateau
— the entropy of the bundled corpus's token frequencies, the loss of a model that predicts every masked token
from those frequencies alone — and says of each size whether its chosen lr's dev loss lies at least
``PLATEAU_MARGIN`` nats below it (the issue's "leaves the unigram plateau").

    python -m mwb.repro.experiments.bert_gpt_scaling_pilot --out DIR

prints one line per size and candidate, the plateau and the choice; ``BertGptScaling.pilots`` records what it
printed and ``bert_gpt_scaling_scales.CPU_PT_LR`` the chosen lrs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil

import numpy as np

from mwb.core.atomic import atomic_write_json
from mwb.core.data.indexed import IndexedDataset

from ..registry import get_experiment
from ..runner import subprocess_invoke
from .biomegatron_scales import last_valid_value

CANDIDATES = (5e-4, 1e-3, 2e-3)
PILOT_SEEDS = (99,)  # report seeds are 0..4; the first recipe's pilots used 97, the second's 98
PLATEAU_MARGIN = 0.5  # nats below the unigram entropy
TIE = 0.01


def unigram_entropy(prefix: str, skip_ids=()) -> float:
    """Entropy (nats) of the token frequencies of a tokenized corpus, leaving out ``skip_ids`` (the special
    tokens a masked LM never has to predict, e.g. the end-of-document id)."""
    tokens = np.asarray(IndexedDataset(prefix).tokens)
    counts = np.bincount(tokens.astype(np.int64))
    for i in skip_ids:
        if i is not None and i < len(counts):
            counts[i] = 0
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def bundled_plateau() -> float:
    """The unigram entropy of the bundled corpus as ``mwb pretrain bert`` reads it (bundled tokenizer)."""
    from mwb.core.data.bundled import default_data
    from mwb.core.tokenizers.loader import load_tokenizer

    prefixes, tok_path = default_data("bert")
    tok = load_tokenizer(tok_path)
    return unigram_entropy(prefixes[0], (tok.eod, tok.pad, tok.mask, tok.cls, tok.sep))


def choose(losses: dict) -> float:
    """The rule on ``{lr: mean dev MLM loss}`` of one size: the lowest finite loss, ties within ``TIE`` to the
    smaller lr; None when no run gave a finite loss."""
    finite = {lr: v for lr, v in losses.items() if v is not None and math.isfinite(v)}
    if not finite:
        return None
    best = min(finite.values())
    return min(lr for lr, v in finite.items() if v <= best + TIE)


def _pretrain(exp, size: str, seed: int, scale, cell_dir: str, invoke) -> float:
    argv = exp.cell_commands(size, seed, scale, cell_dir, {})[0]
    assert argv[1:3] == ["pretrain", "bert"], argv
    invoke(argv)
    out = argv[argv.index("--out") + 1]
    loss = last_valid_value(os.path.join(out, "metrics.jsonl"), "lm_loss")
    shutil.rmtree(os.path.join(out, "checkpoints"), ignore_errors=True)  # the loss is all the rule reads
    return None if loss is None else float(loss)


def run_pilot(out: str, invoke=subprocess_invoke, plateau=None) -> dict:
    exp = get_experiment("bert-gpt-scaling")
    scale = exp.scales["cpu"]
    plateau = bundled_plateau() if plateau is None else plateau
    rows, chosen, left = [], {}, {}
    for size in exp.conditions:
        means = {}
        for lr in CANDIDATES:
            variant = dataclasses.replace(scale, params={**scale.params, "pt_lr": {**scale.params["pt_lr"], size: lr}})
            losses = []
            for s in PILOT_SEEDS:
                loss = _pretrain(exp, size, s, variant, os.path.join(out, size, f"lr{lr:g}", f"seed{s}"), invoke)
                rows.append({"size": size, "lr": lr, "seed": s, "dev_mlm_loss": loss})
                losses.append(loss)
            means[lr] = (None if any(v is None or not math.isfinite(v) for v in losses)
                         else sum(losses) / len(losses))
        chosen[size] = choose(means)
        left[size] = chosen[size] is not None and means[chosen[size]] <= plateau - PLATEAU_MARGIN
    result = {"rows": rows, "plateau_nats": plateau, "chosen": chosen, "leaves_plateau": left,
              "seeds": list(PILOT_SEEDS)}
    atomic_write_json(os.path.join(out, "pilot.json"), result)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    result = run_pilot(ap.parse_args().out)
    for r in result["rows"]:
        loss = "not finite" if r["dev_mlm_loss"] is None else f"{r['dev_mlm_loss']:.3f}"
        print(f"{r['size']} lr {r['lr']:g} seed {r['seed']}: dev MLM loss {loss}")
    print(f"unigram plateau: {result['plateau_nats']:.3f} nats")
    for size, lr in result["chosen"].items():
        print(f"{size}: chosen lr {lr:g}; leaves the plateau by {PLATEAU_MARGIN} nats: {result['leaves_plateau'][size]}")


if __name__ == "__main__":
    main()
