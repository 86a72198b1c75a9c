"""Render a :class:`.search.PlanResult` as the text ``mwb plan`` prints, or as a JSON-able dict.

Every number says what it counts (which FLOP formula, which pipeline rank, which group's bytes) because a
planner whose output needs the source to interpret is not a planner.
"""
from __future__ import annotations

from ..training.energy import plan_energy
from ..training.rampup import BatchRampup
from .cost import CostModel, Estimate
from .formulas import STATE_BYTES, paper_flops_per_iteration, paper_parameter_count
from .memory import MemoryModel
from .model import ModelShape, flops_per_iteration
from .search import PlanResult

GiB = 2**30


def is_paper_shape(shape: ModelShape) -> bool:
    """Whether the Narayanan et al. formulas describe this model exactly (a GPT-2-style GPT)."""
    c = shape.cfg
    return (c.arch == "gpt" and c.activation == "gelu" and c.ffn_size == 4 * c.hidden_size
            and c.query_groups == c.num_attention_heads and not c.num_experts and c.bias
            and c.normalization == "layernorm" and c.position_embedding == "learned"
            and c.head_dim * c.num_attention_heads == c.hidden_size)


def _b(n: float) -> str:
    return f"{n / 1e9:,.2f} B"


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def flops_summary(result: PlanResult) -> dict:
    shape, B = result.shape, result.workload.global_batch_size
    out = {mode: flops_per_iteration(shape, B, mode) for mode in ("full", "selective", "none")}
    tokens = B * shape.seq_length
    out["per_token"] = {mode: out[mode] / tokens for mode in ("full", "selective", "none")}
    if is_paper_shape(shape):
        out["paper_formula"] = paper_flops_per_iteration(B, shape.seq_length, shape.num_layers, shape.h,
                                                         shape.padded_vocab(1))
    return out


def energy_estimate(result: PlanResult, train_tokens: float, grid_gco2_per_kwh: float, pue: float = 1.0) -> dict:
    """Energy and CO2e of training on ``train_tokens`` tokens: model FLOPs (no recompute) per token ×
    tokens, run at the MFU the best layout's estimate reaches (the hardware's efficiency when none fits),
    every GPU at its board power. With a batch-size ramp-up the run's time is summed over its phases
    instead (:func:`rampup_time`): the small early batches run the same layout at a lower MFU (more
    pipeline bubble, gradient reduction amortised over fewer samples), and the MFU reported is the run's."""
    per_token = flops_summary(result)["per_token"]["none"]
    best, hw = result.best, result.hardware
    mfu = best.mfu if best is not None else hw.efficiency
    ramp = rampup_time(result, train_tokens) if result.workload.rampup and best is not None else None
    if ramp is not None:
        mfu = per_token * train_tokens / (result.workload.gpus * hw.peak_tflops * 1e12 * ramp["seconds"])
    out = plan_energy(per_token * train_tokens, result.workload.gpus, hw.peak_tflops, mfu, hw.power_w,
                      grid_gco2_per_kwh, pue)
    out["train_tokens"] = train_tokens
    out["mfu_from"] = ("best layout, over the ramp-up's batch sizes" if ramp is not None else
                       "best layout" if best is not None else "--efficiency (no layout fits)")
    if ramp is not None:
        out["rampup"] = ramp
    return out


def rampup_time(result: PlanResult, train_tokens: float) -> dict:
    """Seconds of a run of ``train_tokens`` tokens with the workload's batch-size ramp-up on the best layout:
    Σ over phases of (iterations at batch b) × (the cost model's time per iteration at b). The schedule is
    Megatron's (:class:`~mwb.core.training.rampup.BatchRampup`), walked until the tokens are consumed."""
    wl, best, shape = result.workload, result.best, result.shape
    ramp = BatchRampup.from_config(list(wl.rampup), wl.global_batch_size)
    per_iter: dict[int, float] = {}
    seconds = ramp_seconds = 0.0
    iterations = ramp_iterations = 0
    phases = ramp.phases(total_samples=train_tokens / shape.seq_length)
    for b, n in phases:
        if b not in per_iter:
            mem = MemoryModel(shape, b, wl.precision, result.constraints.flash_attention)
            per_iter[b] = CostModel(mem, result.hardware).estimate(best.layout).time_s
        seconds += n * per_iter[b]
        iterations += n
        if b != wl.global_batch_size:
            ramp_seconds += n * per_iter[b]
            ramp_iterations += n
    return {"start": ramp.start, "increment": ramp.increment, "samples": ramp.samples,
            "samples_per_increment": ramp.samples_per_increment, "seconds": seconds,
            "iterations": iterations, "ramp_iterations": ramp_iterations, "ramp_seconds": ramp_seconds,
            "constant_batch_seconds": train_tokens / shape.seq_length / wl.global_batch_size * best.time_s,
            "phases": [[b, n] for b, n in phases]}


def render_energy(e: dict, gpus: int) -> list[str]:
    ramp = e.get("rampup")
    extra = []
    if ramp:
        extra = [f"  batch ramp-up        {ramp['start']} + {ramp['increment']} per "
                 f"{ramp['samples_per_increment']:,.0f} samples up to the global batch: "
                 f"{ramp['ramp_iterations']:,} of {ramp['iterations']:,} iterations, "
                 f"{ramp['ramp_seconds'] / 3600:,.1f} h; the run takes "
                 f"{ramp['seconds'] / max(ramp['constant_batch_seconds'], 1e-12) - 1:+.1%} against a constant batch"]
    return ["", f"energy of the planned run ({e['train_tokens']:.3g} tokens; model FLOPs / (GPUs · peak · MFU) "
                f"× GPUs × device power{' × PUE' if e['pue'] != 1 else ''})",
            *extra,
            f"  training FLOPs       {e['train_flops']:.3e}   at MFU {e['mfu']:.0%} ({e['mfu_from']})",
            f"  time                 {e['seconds'] / 86400:,.1f} days on {gpus} GPUs = {e['gpu_hours']:,.0f} GPU-hours",
            f"  energy               {e['energy_mwh']:,.1f} MWh = {e['energy_j']:.3e} J at {e['device_power_w']:g} W "
            f"per GPU" + (f", PUE {e['pue']:g}" if e['pue'] != 1 else ""),
            f"  CO2e                 {e['co2e_t']:,.1f} t at {e['grid_gco2_per_kwh']:g} gCO2e/kWh"]


def to_dict(result: PlanResult, top: int = 10) -> dict:
    shape, p = result.shape, result.params
    c = shape.cfg
    params = {"total": p.total, "embedding": p.embedding, "blocks": p.blocks, "head": p.head,
              "active_per_token": p.active, "expert": p.expert}
    if is_paper_shape(shape):
        params["paper_formula"] = paper_parameter_count(shape.num_layers, shape.h, shape.padded_vocab(1),
                                                        c.max_position_embeddings)
    best = result.best
    if best is not None:
        params["per_rank"] = best.memory.params
    return {
        "model": {"arch": c.arch, "num_layers": c.num_layers, "hidden_size": c.hidden_size,
                  "num_attention_heads": c.num_attention_heads, "num_query_groups": c.query_groups,
                  "ffn_hidden_size": c.ffn_size, "vocab_size": shape.vocab_size,
                  "vocab_assumed": shape.vocab_assumed, "padded_vocab_size": shape.padded_vocab(1),
                  "seq_length": shape.seq_length, "num_experts": c.num_experts},
        "hardware": dict(result.hardware.__dict__),
        "workload": dict(result.workload.__dict__),
        "parameters": params,
        "flops_per_iteration": flops_summary(result),
        "best": best.as_dict() if best else None,
        "layouts_considered": result.considered,
        "layouts_fitting": len(result.fits),
        "layouts": [e.as_dict() for e in result.fits[:top]],
    }


def render(result: PlanResult, top: int = 10, name: str = "") -> str:
    shape, hw, wl, p = result.shape, result.hardware, result.workload, result.params
    c = shape.cfg
    lines = []
    vocab = f"vocab {shape.vocab_size:,}" + (" (assumed: the config has none)" if shape.vocab_assumed else "")
    lines.append(f"mwb plan{' — ' + name if name else ''}: {c.arch}, {shape.num_layers} layers, hidden "
                 f"{c.hidden_size}, {c.num_attention_heads} heads ({c.query_groups} query groups), ffn "
                 f"{c.ffn_size}, {vocab}, seq {shape.seq_length}"
                 + (f", {c.num_experts} experts top-{c.moe_top_k}" if c.num_experts else ""))
    nodes = -(-wl.gpus // hw.gpus_per_node)
    lines.append(f"cluster: {wl.gpus} GPUs ({nodes} node{'s' if nodes > 1 else ''} of {hw.gpus_per_node}), {hw.memory_gib:g} GiB each "
                 f"({hw.memory_reserve_gib:g} reserved), {hw.peak_tflops:g} TFLOP/s peak at "
                 f"{hw.efficiency:.0%} efficiency; {hw.intra_node_bw:g} GB/s intra-node, "
                 f"{hw.inter_node_bw:g} GB/s inter-node")
    w, g, o = STATE_BYTES[wl.precision]
    tokens = wl.global_batch_size * shape.seq_length
    lines.append(f"workload: global batch {wl.global_batch_size} × {shape.seq_length} = {tokens / 1e6:,.2f} M "
                 f"tokens per iteration; {wl.precision}: {w} B weight + {g} B grad + {o} B optimizer per parameter")
    lines += ["", "parameters",
              f"  exact count          {_b(p.total):>14}   embedding {_b(p.embedding)}, blocks {_b(p.blocks)},"
              f" final norm + head {_b(p.head)}"]
    if is_paper_shape(shape):
        pf = paper_parameter_count(shape.num_layers, shape.h, shape.padded_vocab(1), c.max_position_embeddings)
        lines.append(f"  paper formula        {_b(pf):>14}   12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))")
    if c.num_experts:
        lines.append(f"  active per token     {_b(p.active):>14}   (top-{c.moe_top_k} of {c.num_experts} experts)")
    f = flops_summary(result)
    paper = is_paper_shape(shape)
    lines += ["", "FLOPs per iteration (matmuls, 2 per multiply-add; per token in brackets)",
              f"  full recompute       {f['full']:.3e}  ({f['per_token']['full']:.3e})   "
              + ("= 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), the paper's count" if paper else
                 "what the paper's 96·B·s·l·h²·(…) counts, for this shape"),
              f"  selective recompute  {f['selective']:.3e}  ({f['per_token']['selective']:.3e})",
              f"  no recompute         {f['none']:.3e}  ({f['per_token']['none']:.3e})   "
              + ("= 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)): " if paper else "") + "model FLOPs, used for MFU"]
    best = result.best
    if best is None:
        return "\n".join(lines)
    lines += ["", f"best layout: {best.layout.short()}"] + _details(best, result)
    lines += ["", f"layouts that fit: {len(result.fits)} of {result.considered} valid (best {min(top, len(result.fits))})"]
    lines += _table(result.fits[:top])
    return "\n".join(lines)


def _details(e: Estimate, result: PlanResult) -> list[str]:
    m, cm, lay, hw = e.memory, e.comm, e.layout, result.hardware
    stage = {"only": "the only pipeline stage", "first": "first pipeline stage", "last": "last pipeline stage"}
    acts = ", ".join(f"{k.replace('_', ' ')} {_gib(v)}" for k, v in m.detail.items())
    out = [f"  parameters per GPU   {_b(m.params)} ({stage[m.stage]})",
           f"  memory per GPU       {_gib(m.total)} of {hw.memory_gib - hw.memory_reserve_gib:g} GiB usable "
           f"({stage[m.stage]})",
           f"    weights {_gib(m.weights)}, gradients {_gib(m.grads)}, optimizer {_gib(m.optimizer)}",
           f"    activations {_gib(m.activations)}: {acts}",
           f"  pipeline             {e.microbatches} micro-batches of {lay.micro_batch_size} per replica; "
           f"bubble (p−1)/(v·m) = {e.bubble:.1%}",
           "  communication per GPU per iteration",
           f"    TP  {cm.tp_bytes / 1e9:10,.1f} GB  {cm.tp_s:8.2f} s  on the critical path",
           f"    PP  {cm.pp_bytes / 1e9:10,.1f} GB  {cm.pp_s:8.2f} s  on the critical path",
           f"    DP  {cm.dp_bytes / 1e9:10,.1f} GB  {cm.dp_s:8.2f} s  {cm.dp_exposed_s:.2f} s exposed after overlap"]
    if cm.ep_bytes:
        out.insert(-1, f"    EP  {cm.ep_bytes / 1e9:10,.1f} GB  {cm.ep_s:8.2f} s  on the critical path")
    out.append(f"  time per iteration   {e.time_s:.3g} s (compute {e.compute_s:.3g} s at {hw.efficiency:.0%} of "
               f"peak) → {e.tflops_per_gpu:.0f} TFLOP/s per GPU as the paper counts, MFU {e.mfu:.0%}")
    return out


def _table(fits: list[Estimate]) -> list[str]:
    head = (f"  {'#':>3} {'tp':>3} {'pp':>4} {'vpp':>3} {'dp':>5} {'mb':>3} {'sp':>3} {'recompute':>9} "
            f"{'dist-opt':>8} {'GiB':>6} {'bubble':>6} {'TP s':>7} {'PP s':>6} {'DP exp s':>8} {'s/iter':>8} "
            f"{'TFLOP/s':>7}")
    rows = [head]
    for i, e in enumerate(fits, 1):
        lay = e.layout
        rows.append(f"  {i:>3} {lay.tp:>3} {lay.pp:>4} {lay.vpp:>3} {lay.dp:>5} {lay.micro_batch_size:>3} "
                    f"{'on' if lay.sp else '-':>3} {lay.recompute:>9} "
                    f"{'on' if lay.distributed_optimizer else '-':>8} {e.memory.total / GiB:6.1f} "
                    f"{e.bubble:6.1%} {e.comm.tp_s:7.2f} {e.comm.pp_s:6.2f} {e.comm.dp_exposed_s:8.2f} "
                    f"{e.time_s:8.3g} {e.tflops_per_gpu:7.0f}")
    return rows
