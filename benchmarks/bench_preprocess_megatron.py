"""``mwb preprocess`` beside Megatron's own pipeline and beside the bare tokenizer, on the same JSONL.

Three runs on one JSONL file (``--size-mb``, default 60 MB, made of the bundled corpus's documents in
random order, repeated), one Hugging Face tokenizer (default: the bundled 8,192-entry byte-level BPE
``tokenizer.json``) and ``--workers`` processes, end of document appended:

  mwb         ``mwb.core.data.preprocess.preprocess`` (what ``mwb preprocess`` runs)
  megatron    megatron-core's ``IndexedDatasetBuilder`` fed the way Megatron-LM's
              ``tools/preprocess_data.py`` feeds it: a ``multiprocessing.Pool`` whose workers each build
              the tokenizer once (Megatron's HF tokenizer: ``PreTrainedTokenizerFast``, called once per
              document), ``pool.imap(encode, lines, 32)`` over the raw lines (``json.loads``, tokenize, EOD),
              then ``add_document(ids, lengths)`` per document and ``finalize(idx)``
  tokenizers  the bare ``tokenizers`` ``encode_batch`` over the already parsed texts, ``RAYON_NUM_THREADS``
              = workers, no parsing and no writing: the upper bound for any pipeline

MB/s counts input JSONL bytes; docs/s documents. The two ``.bin``/``.idx`` pairs are compared byte for
byte. Needs ``pip install megatron-core`` (0.16.1 here; it imports on CPU with a warning that
transformer-engine and apex are absent).

    python benchmarks/bench_preprocess_megatron.py                      # 60 MB, 2 workers
    python benchmarks/bench_preprocess_megatron.py --size-mb 10 --workers 2
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class MegatronStyleEncoder:
    """Per-worker state as in Megatron's tool: the tokenizer is built once per process by ``initializer``."""

    def __init__(self, tokenizer_file: str, key: str) -> None:
        self.tokenizer_file, self.key = tokenizer_file, key

    def initializer(self) -> None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast(tokenizer_file=self.tokenizer_file)
        MegatronStyleEncoder.tokenizer = tok
        MegatronStyleEncoder.eod = tok.convert_tokens_to_ids("<|endoftext|>")

    def encode(self, line: str):
        text = json.loads(line)[self.key]
        ids = MegatronStyleEncoder.tokenizer(text, add_special_tokens=False).input_ids if text else []
        lengths = [len(ids)] if ids else []
        if ids:
            ids.append(MegatronStyleEncoder.eod)
            lengths[-1] += 1
        return ids, lengths, len(line.encode())


def run_megatron(jsonl: str, prefix: str, tokenizer_file: str, workers: int, vocab_size: int) -> dict:
    import multiprocessing as mp

    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    enc = MegatronStyleEncoder(tokenizer_file, "text")
    t0 = time.perf_counter()
    pool = mp.get_context("spawn").Pool(workers, initializer=enc.initializer)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(vocab_size))
    docs = nbytes = 0
    with open(jsonl, encoding="utf-8") as fin:
        for ids, lengths, n in pool.imap(enc.encode, fin, 32):
            nbytes += n
            if lengths:  # mwb writes no entry for an empty document either
                builder.add_document(ids, lengths)
            docs += 1
    builder.finalize(prefix + ".idx")
    pool.close()
    pool.join()
    return {"seconds": time.perf_counter() - t0, "bytes": nbytes, "docs": docs}


def run_mwb(jsonl: str, prefix: str, tokenizer_file: str, workers: int) -> dict:
    from mwb.core.data.preprocess import preprocess
    r = preprocess([jsonl], prefix, tokenizer_file, workers=workers, append_eod=True, progress=False)
    return {"seconds": r.seconds, "bytes": r.bytes, "docs": r.documents, "prefix": r.outputs["text"]}


BARE = r"""
import json, os, sys, time
os.environ["RAYON_NUM_THREADS"] = sys.argv[3]
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[2])
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
t0 = time.perf_counter()
for i in range(0, len(texts), 2048):
    tok.encode_batch_fast(texts[i:i + 2048], add_special_tokens=False)
print(time.perf_counter() - t0)
"""


def run_bare(jsonl: str, tokenizer_file: str, workers: int) -> float:
    out = subprocess.run([sys.executable, "-c", BARE, jsonl, tokenizer_file, str(workers)], check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def same_files(a: str, b: str) -> bool:
    return all(filecmp.cmp(a + ext, b + ext, shallow=False) for ext in (".bin", ".idx"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tokenizer", default=None, help="a tokenizer.json (default: the bundled BPE)")
    ap.add_argument("--reps", type=int, default=1, help="alternating repetitions of mwb and megatron")
    args = ap.parse_args()
    from bench_preprocess import make_synthetic

    from mwb.core.data.bundled import tokenizer_file
    from mwb.core.tokenizers import load_tokenizer
    tok_file = args.tokenizer or tokenizer_file()
    vocab = load_tokenizer(tok_file).vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "corpus.jsonl")
        size = make_synthetic(jsonl, args.size_mb)
        runs: dict = {"mwb": [], "megatron": []}
        for _ in range(args.reps):
            runs["mwb"].append(run_mwb(jsonl, os.path.join(tmp, "mwb"), tok_file, args.workers))
            runs["megatron"].append(run_megatron(jsonl, os.path.join(tmp, "meg"), tok_file, args.workers, vocab))
        bare = run_bare(jsonl, tok_file, args.workers)
        identical = same_files(runs["mwb"][-1]["prefix"], os.path.join(tmp, "meg"))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    mbs = {k: r["bytes"] / 1e6 / r["seconds"] for k, r in best.items()}
    bare_mbs = size / 1e6 / bare
    print(f"# preprocessing, {size / 1e6:.1f} MB JSONL ({best['mwb']['docs']:,} documents), tokenizer "
          f"{os.path.basename(tok_file)} (vocab {vocab:,}), {args.workers} worker(s), best of {args.reps}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| pipeline | s | MB/s | docs/s | vs megatron-core | vs bare tokenizer |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for k in ("mwb", "megatron"):
        r = best[k]
        print(f"| {k} | {r['seconds']:.2f} | {mbs[k]:.2f} | {r['docs'] / r['seconds']:,.0f} | "
              f"{mbs[k] / mbs['megatron']:.2f}× | {mbs[k] / bare_mbs:.0%} |")
    print(f"| bare tokenizers encode_batch (parsed texts, no output) | {bare:.2f} | {bare_mbs:.2f} | "
          f"{best['mwb']['docs'] / bare:,.0f} | {bare_mbs / mbs['megatron']:.2f}× | 100% |")
    print(f"\n.bin/.idx of mwb and megatron-core byte-identical: {identical}")


if __name__ == "__main__":
    main()
