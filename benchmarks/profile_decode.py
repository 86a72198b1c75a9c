"""Where a batch-16 decoding step's time goes: ``torch.profiler`` over one :func:`mwb.evaluation.generation.generate`
call of 16 greedy rows (16 prompts of 20–170 tokens, 16 new tokens) on one torch thread, ops sorted by their own
CPU time. Used in docs/benchmarks.md ("Serving") to tell the model's matrix products from the engine's own work.

    python benchmarks/profile_decode.py                 # smollm2-135m (installed named model)
    python benchmarks/profile_decode.py --rows 25
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from mwb.core.named_models import local_checkpoint  # noqa: E402
from mwb.evaluation.generation import SamplingParams, generate  # noqa: E402
from mwb.evaluation.loading import load_language_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rows", type=int, default=25, help="rows of the printed table")
    args = ap.parse_args()
    torch.set_num_threads(1)
    _, lm = load_language_model(local_checkpoint(args.checkpoint), None, torch.device("cpu"))
    prompts = [" ".join(["The king spoke to the people of the city"] * (2 + i)) for i in range(16)]
    generate(lm, prompts[:2], SamplingParams(max_tokens=2, temperature=0.0), batch_size=16)  # warm-up
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, stop_at_eod=False)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        generate(lm, prompts, params, batch_size=16)
        wall = time.perf_counter() - start
    print(f"16 rows × {args.max_tokens} tokens: {wall:.1f} s wall (profiled)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
