"""What the paper's own run would cost: ``mwb plan``'s estimate for a :class:`~mwb.repro.api.PlanSpec`.

``--dry-run`` at ``paper`` scale prints, for each of the paper's models and clusters, the ``mwb plan`` command
and one summary: the best layout the planner finds under the spec's constraints, its time per iteration and
memory per GPU, and the energy and CO2e of training on the spec's tokens. It calls the planner functions
``mwb plan`` calls (preset → model, hardware profile, workload, constraints → search → energy estimate).
"""
from __future__ import annotations

import shlex

from mwb.core.config import RunConfig
from mwb.core.plan import HARDWARE, Constraints, Workload, plan
from mwb.core.plan.report import energy_estimate
from mwb.core.presets import apply_preset

from .api import PlanSpec

GRID_GCO2_PER_KWH = 475.0  # mwb plan's default (EnergyConfig): IEA world average


def estimate(spec: PlanSpec) -> dict:
    """``{"layout", "time_s", "memory_gib", "tflops_per_gpu", "energy"}`` (layout None when nothing fits)."""
    model = apply_preset(RunConfig(), spec.preset).model
    workload = Workload(spec.gpus, spec.global_batch_size, spec.precision or "bf16")
    constraints = Constraints(tp=spec.tp, pp=spec.pp, recompute=spec.recompute, sp=spec.sp,
                              distributed_optimizer=spec.distributed_optimizer)
    result = plan(model, workload, HARDWARE[spec.hardware], constraints, spec.seq_length)
    tokens = spec.train_tokens or 0.0
    energy = energy_estimate(result, tokens, GRID_GCO2_PER_KWH) if tokens else None
    best = result.best
    if best is None:
        return {"layout": None, "time_s": None, "memory_gib": None, "tflops_per_gpu": None, "energy": energy}
    return {"layout": best.layout.short(), "time_s": best.time_s, "memory_gib": best.memory.total / 2**30,
            "tflops_per_gpu": best.tflops_per_gpu, "energy": energy}


def describe(spec: PlanSpec) -> str:
    """The command and a two-line summary of its estimate."""
    e = estimate(spec)
    lines = [f"# {spec.label}", shlex.join(spec.argv())]
    if e["layout"] is None:
        lines.append("#   no layout fits this cluster's memory under these constraints")
        return "\n".join(lines)
    lines.append(f"#   {e['layout']}: {e['time_s']:.3g} s/iteration, {e['memory_gib']:.1f} GiB per GPU, "
                 f"{e['tflops_per_gpu']:.0f} TFLOP/s per GPU")
    if e["energy"]:
        en = e["energy"]
        lines.append(f"#   {en['train_tokens']:.3g} tokens: {en['seconds'] / 86400:,.1f} days, "
                     f"{en['energy_mwh']:,.1f} MWh, {en['co2e_t']:,.1f} t CO2e at {GRID_GCO2_PER_KWH:g} gCO2e/kWh")
    return "\n".join(lines)
