"""Narayanan et al. 2021, Table 1, replayed through the planner; the table in ``docs/plan.md`` comes from here.

For each row the planner is run three ways on the paper's cluster (A100 80 GB, 312 TFLOP/s peak, 8 GPUs per
node, the paper's GPU count and batch, sequence 2,048):

* free: every switch mwb has (selective recompute, sequence parallelism, distributed optimizer, bf16);
* with the paper's 2021 features: fp16, full recompute, no sequence parallelism, replicated optimizer;
* the paper's TP/PP with those features (the best interleaving and micro-batch for it), whose predicted time
  is compared with the time the paper's measured throughput implies: FLOPs / (GPUs · achieved TFLOP/s).

``python -m mwb.core.plan.paper`` prints the table; ``--write`` replaces it in ``docs/plan.md``. The test
regenerates it and checks the document says what the planner currently predicts.
"""
from __future__ import annotations

import argparse
import pathlib
from dataclasses import dataclass, replace

from ..config import RunConfig
from ..presets import apply_preset
from .cost import Estimate
from .formulas import paper_flops_per_iteration
from .layout import HARDWARE, Constraints, Hardware, Workload
from .search import search


@dataclass(frozen=True)
class Row:
    preset: str
    params_b: float  # as printed in the paper
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    gpus: int
    batch: int
    tflops: float  # achieved teraFLOP/s per GPU


TABLE1 = [
    Row("gpt-1.7b", 1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    Row("gpt-3.6b", 3.6, 30, 3072, 32, 2, 1, 64, 512, 138),
    Row("gpt-7.5b", 7.5, 36, 4096, 32, 4, 1, 128, 512, 142),
    Row("gpt-18b", 18.4, 40, 6144, 48, 8, 1, 256, 1024, 135),
    Row("gpt-39b", 39.1, 48, 8192, 64, 8, 2, 512, 1536, 138),
    Row("gpt-76b", 76.1, 60, 10240, 80, 8, 4, 1024, 1792, 140),
    Row("gpt-145b", 145.6, 80, 12288, 96, 8, 8, 1536, 2304, 148),
    Row("gpt-310b", 310.1, 96, 16384, 128, 8, 16, 1920, 2160, 155),
    Row("gpt-530b", 529.6, 105, 20480, 128, 8, 35, 2520, 2520, 163),
    Row("gpt-1t", 1008.0, 128, 25600, 160, 8, 64, 3072, 3072, 163),
]
SEQ, VOCAB = 2048, 51200
PAPER_HW = HARDWARE["a100-80gb"]
PAPER_FEATURES = dict(recompute="full", sp=False, distributed_optimizer=False)
PAPER_PRECISION = "fp16"


@dataclass(frozen=True)
class Reproduction:
    row: Row
    top: Estimate  # free search
    top_2021: Estimate  # search restricted to the paper's features
    paper_free: Estimate  # the paper's TP/PP, every feature free
    paper_2021: Estimate  # the paper's TP/PP with the paper's features

    @property
    def implied_s(self) -> float:
        r = self.row
        return paper_flops_per_iteration(r.batch, SEQ, r.layers, r.hidden, VOCAB) / (r.gpus * r.tflops * 1e12)

    @property
    def same_tp_pp(self) -> bool:
        return (self.top.layout.tp, self.top.layout.pp) == (self.row.tp, self.row.pp)


def reproduce(row: Row, hw: Hardware = PAPER_HW) -> Reproduction:
    model = apply_preset(RunConfig(), row.preset).model
    free, old = Workload(row.gpus, row.batch, "bf16"), Workload(row.gpus, row.batch, PAPER_PRECISION)
    fixed = Constraints(tp=row.tp, pp=row.pp)
    top = search(model, free, hw, Constraints(), SEQ).best
    top_2021 = search(model, old, hw, Constraints(**PAPER_FEATURES), SEQ).best
    paper_free = search(model, free, hw, fixed, SEQ).best
    paper_2021 = search(model, old, hw, replace(fixed, **PAPER_FEATURES), SEQ).best
    return Reproduction(row, top, top_2021, paper_free, paper_2021)


def _parts(e: Estimate) -> dict:
    """Where an estimate's time goes, in seconds (bubble-stretched pieces on the critical path)."""
    stretch = 1 + e.bubble
    return {"compute": e.compute_s, "bubble": e.bubble * (e.compute_s + e.comm.tp_s + e.comm.pp_s),
            "TP comm": e.comm.tp_s * stretch, "PP p2p": e.comm.pp_s * stretch,
            "exposed DP comm": e.comm.dp_exposed_s}


def why(rep: Reproduction) -> str:
    """A generated explanation of where the planner's choice and the paper's differ."""
    row, top, pf = rep.row, rep.top, rep.paper_free
    notes = []
    if rep.same_tp_pp:
        notes.append("same TP/PP")
    else:
        slower = pf.time_s / top.time_s - 1
        diffs = {k: v - _parts(top)[k] for k, v in _parts(pf).items()}
        big = sorted(diffs.items(), key=lambda kv: -abs(kv[1]))[:2]
        parts = ", ".join(f"{k} {d:+.2f} s" for k, d in big if abs(d) >= 0.005)
        verdict = "a tie" if slower < 0.0005 else f"{slower:.1%} slower"
        notes.append(f"paper's {row.tp}/{row.pp}, best switches for it: {verdict} ({parts})")
    if (rep.top_2021.layout.tp, rep.top_2021.layout.pp) != (row.tp, row.pp):
        notes.append(f"with 2021 features the top is {rep.top_2021.layout.tp}/{rep.top_2021.layout.pp}")
    else:
        notes.append("with 2021 features the top is the paper's")
    extra = [("recompute " + top.layout.recompute) if top.layout.recompute != "full" else "",
             "SP" if top.layout.sp else "", "distributed optimizer" if top.layout.distributed_optimizer else ""]
    extra = [x for x in extra if x]
    if extra:
        notes.append("top uses " + ", ".join(extra))
    return "; ".join(notes)


def _lay(e: Estimate) -> str:
    lay = e.layout
    s = f"{lay.tp}/{lay.pp}, dp {lay.dp}"
    if lay.vpp > 1:
        s += f", v {lay.vpp}"
    return s + f", mb {lay.micro_batch_size}"


def markdown(reps: list[Reproduction]) -> str:
    a = ["| model | GPUs | batch | paper TP/PP | planner top (TP/PP, dp, interleave, micro-batch) | same TP/PP | "
         "top with 2021 features | why |",
         "| --- | ---: | ---: | --- | --- | --- | --- | --- |"]
    b = ["| model | paper TP/PP as planned (2021 features) | GiB/GPU | predicted s/iter | implied s/iter "
         "| predicted / implied | predicted TFLOP/s/GPU | paper TFLOP/s/GPU | planner top s/iter |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in reps:
        row = r.row
        name = f"{row.params_b:g} B"
        a.append(f"| {name} | {row.gpus} | {row.batch} | {row.tp}/{row.pp} | {_lay(r.top)}, "
                 f"{r.top.layout.recompute}{', sp' if r.top.layout.sp else ''}"
                 f"{', dist-opt' if r.top.layout.distributed_optimizer else ''} | "
                 f"{'yes' if r.same_tp_pp else 'no'} | {_lay(r.top_2021)} | {why(r)} |")
        p = r.paper_2021
        b.append(f"| {name} | {_lay(p)} | {p.memory.total / 2**30:.1f} | {p.time_s:.2f} | {r.implied_s:.2f} | "
                 f"{p.time_s / r.implied_s:.2f} | {p.tflops_per_gpu:.0f} | {row.tflops:g} | {r.top.time_s:.2f} |")
    return "\n".join(a) + "\n\n" + "\n".join(b) + "\n"


BEGIN, END = "<!-- table1:begin (generated by python -m mwb.core.plan.paper --write) -->", "<!-- table1:end -->"


def doc_block(text: str) -> str:
    """The generated table as it stands in a document."""
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:stop].strip("\n") + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="DOC", nargs="?", const="docs/plan.md",
                    help="replace the generated block of DOC (default docs/plan.md)")
    args = ap.parse_args(argv)
    table = markdown([reproduce(r) for r in TABLE1])
    if not args.write:
        print(table, end="")
        return
    path = pathlib.Path(args.write)
    text = path.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n" + table + text[stop:])
    print(f"updated {path}")


if __name__ == "__main__":
    main()
