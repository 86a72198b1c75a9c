"""Activation memory of one real mwb transformer layer, measured, next to what the planner predicts.

:func:`measure_layer` builds a one-layer mwb GPT (``build_model``: the same modules, tensor/sequence
parallelism and :func:`~mwb.core.parallel.recompute.apply_recompute` as training), runs the layer forward
on a ``[b, s, h]`` input (``[b, s/t, h]`` with sequence parallelism) under
``torch.autograd.graph.saved_tensors_hooks`` and adds up the bytes of every tensor autograd keeps for
backward. Each storage is counted once (a view saved twice, e.g. ``q`` and the ``q_proj`` output, is one
buffer), parameters and buffers are not activations and are left out. Under recomputation the tensors a
checkpoint keeps are its tensor inputs, which ``torch.utils.checkpoint`` (non-reentrant) saves through the
same hooks, so ``selective`` counts the attention core's q, k, v and ``full`` the layer input.

:func:`predicted_layer` asks :func:`~mwb.core.plan.formulas.activation_bytes_per_layer` about the same
layer, passing the shape keywords that describe what mwb runs: ``flash=True`` when SDPA runs a fused kernel
(on CPU: attention dropout 0; on CUDA: always), which keeps q, k, v, the output and a float32
log-sum-exp, not the s×s scores; ``dropout=`` whether hidden dropout masks exist; the FFN size, query
groups, head size and ``gated`` for SwiGLU.

What the planner's accounting does not describe is returned by :func:`known_differences`, by name, so the
measured-versus-predicted comparison states every byte it explains (``docs/benchmarks.md`` has the table):

* ``norm_stats``: each LayerNorm keeps its mean and 1/std (one element per token each); on CUDA, each
  RMSNorm keeps a float32 1/rms per token (measured on an H200: the 1 KiB left over at s=32, b=4).
* ``rmsnorm_fp32``: ``nn.RMSNorm`` on 16-bit input on CPU computes in float32 and keeps a float32 copy of
  its input and of the normalised input (plus 1/rms) instead of the 16-bit input: 8 bytes per element, not 2.

Two former differences are gone: under sequence parallelism the QKV and FC1 projections keep only the local
``[b, s/t, h]`` shard and all-gather it again in backward (``tensor_parallel._SequenceGatheredLinear``, as
Megatron does), and hidden dropout keeps a 1-byte boolean mask on CPU too (:mod:`mwb.core.models.dropout`).
* ``gqa_repeated_kv``: on torch < 2.5 (no ``enable_gqa``), grouped-query attention repeats k and v to
  every query head before ``scaled_dot_product_attention``, so the kernel keeps a-head k and v, not g-head.
  From torch 2.5 the kernel shares the kv heads itself and keeps g-head k and v, as the planner counts.
* ``swiglu_product_inputs``: SwiGLU as ``silu(gate)·up`` keeps silu's output for the product as well as
  its input (one more s·b·f/t tensor than a fused SwiGLU, which is what ``gated=True`` counts).
* ``selective_lse``: under selective recompute the fused kernel's log-sum-exp is recomputed too.
* ``math_attention``: with attention dropout > 0 the fused kernel cannot run and PyTorch's math kernel
  does; for bf16 inputs on CPU it computes in float32 and keeps float32 copies of q, k, v, the softmax,
  the dropout mask (float32, not 1 byte) and the dropped probabilities: per score 12 bytes, not 5.

The differences above were measured on CPU (``tests/core/plan/test_activation_measure.py``, bf16, TP1 and
TP2+SP: every byte accounted for). ``LayerCase(device="cuda")`` measures on a GPU; its branches of
:func:`known_differences` (1-byte dropout masks, float32 LayerNorm statistics, fused attention with dropout)
follow PyTorch's CUDA kernels. They were measured once on an H200 (``benchmarks/gpu_mfu.py``, TP1, bf16:
every row within 0.2%, see ``docs/benchmarks.md``); CI has no GPU.

Nothing here runs unless called: ``mwb.core.plan`` itself stays pure arithmetic and does not import this.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..models.transformer import SDPA_GQA
from .formulas import activation_breakdown, activation_bytes_per_layer

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class LayerCase:
    """One layer configuration: sequence, micro-batch, hidden, heads, TP size, SP, recompute, shape."""

    s: int
    b: int
    h: int
    a: int
    t: int = 1
    sp: bool = False
    recompute: str = "none"
    ffn: Optional[int] = None
    groups: Optional[int] = None
    dropout: float = 0.0  # hidden dropout (after attention and MLP)
    attn_dropout: float = 0.0
    activation: str = "gelu"
    normalization: str = "layernorm"
    device: str = "cpu"

    def with_(self, **kw) -> "LayerCase":
        return dataclasses.replace(self, **kw)

    @property
    def label(self) -> str:
        extra = []
        if self.ffn:
            extra.append(f"f={self.ffn}")
        if self.groups:
            extra.append(f"g={self.groups}")
        if self.activation != "gelu":
            extra.append(self.activation)
        if self.normalization != "layernorm":
            extra.append(self.normalization)
        if self.dropout:
            extra.append(f"drop={self.dropout}")
        if self.attn_dropout:
            extra.append(f"attn_drop={self.attn_dropout}")
        par = f"TP{self.t}" + ("+SP" if self.sp else "") + ("" if self.device == "cpu" else f" {self.device}")
        return f"s={self.s} b={self.b} h={self.h} a={self.a}{' ' + ' '.join(extra) if extra else ''} {par} " \
               f"{self.recompute}"

    def model_config(self):
        from ..config import ModelConfig
        return ModelConfig(num_layers=1, hidden_size=self.h, num_attention_heads=self.a,
                           num_query_groups=self.groups, ffn_hidden_size=self.ffn, dropout=self.dropout,
                           attention_dropout=self.attn_dropout, activation=self.activation,
                           normalization=self.normalization, max_position_embeddings=max(self.s, 8))

    @property
    def head_dim(self) -> int:
        return self.h // self.a

    @property
    def ffn_size(self) -> int:
        return self.model_config().ffn_size


# ----------------------------------------------------------------------------------------- measuring


@dataclass
class SavedTensors:
    """What autograd kept: total bytes (each storage once) and one row per storage."""

    bytes: int
    rows: list  # (module, shape, dtype, storage bytes)

    def by_module(self) -> dict:
        out: dict = {}
        for mod, _shape, _dtype, n in self.rows:
            out[mod] = out.get(mod, 0) + n
        return out


def count_saved(fn: Callable, *args, exclude: tuple = (), module: Optional[torch.nn.Module] = None,
                **kwargs):
    """``(fn(*args, **kwargs), SavedTensors)``: bytes of every storage saved for backward during the call.

    ``exclude``: tensors (parameters, buffers) whose storages are not counted. With ``module``, each row
    names the innermost submodule running when the tensor was saved.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict = {}
    stack = [""]
    handles = []

    def enter(name):
        def hook(_m, _a):
            stack.append(name)
        return hook

    def leave(_m, _a, _o):
        stack.pop()

    if module is not None:
        for name, m in module.named_modules():
            handles.append(m.register_forward_pre_hook(enter(name)))
            handles.append(m.register_forward_hook(leave))

    def pack(t: torch.Tensor):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in skip and st.nbytes() > 0:
            prev = seen.get(key)
            if prev is None or st.nbytes() > prev[3]:
                seen[key] = (stack[-1] or "<layer>", tuple(t.shape), str(t.dtype).replace("torch.", ""),
                             st.nbytes())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(*args, **kwargs)
    finally:
        for hd in handles:
            hd.remove()
    rows = list(seen.values())
    return out, SavedTensors(sum(r[3] for r in rows), rows)


def _state(case: LayerCase):
    from ..parallel.dims import ParallelDims
    from ..parallel.state import build_state
    if case.t == 1:
        return build_state(ParallelDims(world_size=1), rank=0)
    import torch.distributed as dist
    world = dist.get_world_size()
    return build_state(ParallelDims(world_size=world, tp=case.t, sp=case.sp))


def measure_layer(case: LayerCase, state=None, seed: int = 1234, dtype=torch.bfloat16,
                  vocab: int = 64) -> SavedTensors:
    """Bytes the layer keeps for backward on this rank. ``t > 1`` needs an initialised process group whose
    world is a multiple of ``t`` (pass ``state`` to reuse groups across calls)."""
    from ..config import ParallelConfig
    from ..compose import build_model
    from ..parallel.recompute import apply_recompute
    from ..parallel.random import seed_everything

    if case.recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {case.recompute!r}")
    state = state if state is not None else _state(case)
    seed_everything(seed, state.tp_rank, 0)
    model = build_model(case.model_config(), state, vocab, seed, case.device, dtype)
    apply_recompute(model, ParallelConfig(tp=case.t, sp=case.sp, recompute=case.recompute))
    model.train()
    layer = model.layers["0"]
    seq = case.s // case.t if case.sp else case.s
    gen = torch.Generator().manual_seed(seed + state.rank)
    x = torch.randn(case.b, seq, case.h, generator=gen).to(case.device, dtype).requires_grad_()
    exclude = tuple(model.parameters()) + tuple(model.buffers())
    out, saved = count_saved(layer, x, exclude=exclude, module=layer)
    out.float().sum().backward()  # the graph must be usable: what was counted is what backward needs
    return saved


# ---------------------------------------------------------------------------------------- predicting


def shape_keywords(case: LayerCase) -> dict:
    """The planner's shape keywords for what the mwb layer of ``case`` runs."""
    return {"ffn_hidden_size": case.ffn_size, "query_groups": case.groups or case.a, "head_dim": case.head_dim,
            "gated": case.activation == "swiglu", "dropout": case.dropout > 0, "flash": _fused_attention(case)}


def _fused_attention(case: LayerCase) -> bool:
    """Whether SDPA runs a fused kernel: always on CUDA (flash supports dropout there), on CPU only
    without attention dropout."""
    return case.device != "cpu" or case.attn_dropout == 0


def predicted_layer(case: LayerCase, dtype_bytes: int = 2) -> float:
    """:func:`activation_bytes_per_layer` for ``case`` with its shape keywords."""
    return activation_bytes_per_layer(case.s, case.b, case.h, case.a, case.t, case.sp, case.recompute,
                                      dtype_bytes, **shape_keywords(case))


def known_differences(case: LayerCase, dtype_bytes: int = 2) -> dict:
    """Bytes by which mwb's layer is known to differ from :func:`predicted_layer` (see module docstring)."""
    e, s, b, h, a, t = dtype_bytes, case.s, case.b, case.h, case.a, case.t
    out: dict = {}
    if case.recompute == "full":
        return out
    plan = activation_breakdown(s, b, h, a, t, case.sp, case.recompute, e, **shape_keywords(case))
    rep = 1 / t if case.sp else 1.0  # replicated-region tensors are split over t only with SP
    d, g = case.head_dim, case.groups or a
    cpu = case.device == "cpu"
    if case.normalization == "layernorm":  # mean and 1/std per token, two norms (float32 on CUDA)
        out["norm_stats"] = 2 * 2 * (e if cpu else 4) * s * b * rep
    elif cpu:  # nn.RMSNorm on 16-bit input: float32 input copy + normalised input + rstd instead of the input
        out["rmsnorm_fp32"] = 2 * ((8 - e) * s * b * h + 4 * s * b) * rep
    else:  # CUDA's fused RMSNorm keeps the 16-bit input and a float32 1/rms per token, two norms
        out["norm_stats"] = 2 * 4 * s * b * rep
    if case.activation == "swiglu":
        out["swiglu_product_inputs"] = e * s * b * case.ffn_size / t
    if _fused_attention(case):
        if case.recompute == "none" and g < a and not SDPA_GQA:  # k, v repeated to every query head
            out["gqa_repeated_kv"] = 2 * e * s * b * (a - g) * d / t
        if case.recompute == "selective":
            out["selective_lse"] = -plan.get("softmax_lse", 0.0)
    elif case.recompute == "none":
        # math kernel, float32: q, k, v (k, v repeated to every head), softmax, mask, dropped probabilities
        scores = s * s * b * a / t
        actual = 4 * 3 * s * b * a * d / t + 12 * scores
        counted = sum(plan.get(k, 0.0) for k in ("q", "kv", "softmax_output", "softmax_dropout_mask",
                                                  "softmax_dropout_output"))
        out["math_attention"] = actual - counted
    return out


def compare(case: LayerCase, measured: int) -> dict:
    """One row of the comparison: planner, planner + known differences, measured, ratios."""
    planner = predicted_layer(case)
    diff = known_differences(case)
    explained = planner + sum(diff.values())
    return {"case": case.label, "planner": planner, "explained": explained, "measured": measured,
            "ratio_planner": measured / planner, "ratio": measured / explained, "differences": diff}


def format_table(rows: list[dict]) -> str:
    """Markdown table of :func:`compare` rows (bytes in KiB)."""
    lines = ["| layer (per rank) | planner KiB | + known diff KiB | measured KiB | measured/planner | "
             "measured/(planner+diff) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['planner'] / 1024:.1f} | {r['explained'] / 1024:.1f} | "
                     f"{r['measured'] / 1024:.1f} | {r['ratio_planner']:.3f} | {r['ratio']:.3f} |")
    return "\n".join(lines)


def measure_on_rank(rank: int, world: int, cases: list) -> list[Optional[int]]:
    """Per-rank entry for a spawned process group: bytes of each case measured on this rank.

    Cases with ``t > 1`` are measured by every rank together (each keeps its shard); single-rank cases
    (``t == 1``) are shared out, case ``i`` on rank ``i % world``, ``None`` elsewhere. Process groups are
    built once per (t, sp) and reused."""
    from ..parallel.dims import ParallelDims
    from ..parallel.state import build_state
    states: dict = {}
    out: list = []
    for i, case in enumerate(cases):
        if case.t == 1:
            out.append(measure_layer(case, state=_state(case)).bytes if i % world == rank else None)
            continue
        key = (case.t, case.sp)
        if key not in states:
            states[key] = build_state(ParallelDims(world_size=world, tp=case.t, sp=case.sp), rank=rank)
        out.append(measure_layer(case, state=states[key]).bytes)
    return out
