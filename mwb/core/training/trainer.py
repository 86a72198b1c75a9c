"""One training loop for every model family and parallel layout.

Per optimizer step: fetch this data-parallel rank's micro-batches, run the schedule (gradient accumulation
or a pipeline schedule), then let the optimizer synchronise gradients, clip and update. The reported loss
is Σ token losses / Σ tokens over the whole global batch, computed once here and logged by rank 0.
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from ..checkpoint.async_save import wait_for_save
from ..config import ConfigError, RunConfig
from ..models.transformer import TransformerBlock
from ..optim.fsdp import FSDPOptimizer
from ..optim.optimizer import DistributedOptimizer
from ..optim.scaler import LossScaler
from ..optim.schedules import lr_at
from ..parallel.dims import LayoutError, ParallelDims
from ..parallel.fsdp import apply_fsdp, build_dtype, check_config as check_fsdp
from ..parallel.lora import apply_lora, check_config as check_lora, parameter_counts
from ..parallel.random import seed_everything
from ..parallel.stages import rank_stages
from ..parallel.state import build_state
from .batches import microbatches_from
from .launch import note_stop_signal
from .rampup import BatchRampup
from .schedules import get_schedule

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8": torch.bfloat16}  # fp8: bf16 weights, fp8 GEMMs inside the blocks (models.fp8)
COMPILE_BACKEND = "inductor"  # tests switch to "aot_eager" (same graphs, no code generation: fast to build)


def compile_blocks(chunks, backend: str = COMPILE_BACKEND) -> int:
    """``torch.compile`` every transformer block in place (``nn.Module.compile``: names, state dicts and
    hooks unchanged). Blocks, not the whole model: one graph per block shape is compiled once and reused
    by every layer, and the loss, pipeline hand-offs and collectives stay eager. Returns the count."""
    n = 0
    for chunk in chunks:
        for module in chunk.modules():
            if isinstance(module, TransformerBlock):
                module.compile(backend=backend, dynamic=False)
                n += 1
    return n


@dataclass
class StepResult:
    step: int  # 1-based number of the optimizer step just taken
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    seconds: float
    loss_scale: float
    skipped: bool
    extra: dict = field(default_factory=dict)


def parallel_dims(cfg: RunConfig, world_size: int) -> ParallelDims:
    p, m = cfg.parallel, cfg.model
    dims = ParallelDims(world_size=world_size, tp=p.tp, pp=p.pp, vpp=p.vpp, cp=p.cp, ep=p.ep, sp=p.sp,
                        order=p.order)
    dims.check_model(m.num_attention_heads, m.num_query_groups, m.stage_layers, m.num_experts,
                     cfg.train.seq_length, m.ffn_hidden_size, p.pipeline_layers,
                     layers_what="num_layers" if m.stage_layers == m.num_layers else "encoder + decoder layers")
    if p.cp > 1 and m.arch != "gpt":
        raise LayoutError(f"context parallelism (--cp > 1) is implemented for GPT (causal) models, not "
                          f"'{m.arch}'; use --cp 1")
    if p.cp > 1 and m.num_experts:
        raise LayoutError("context parallelism with mixture-of-experts layers is not supported; use --cp 1")
    t = cfg.train
    if t.global_batch_size % (t.micro_batch_size * dims.dp):
        raise LayoutError(f"global batch size {t.global_batch_size} is not divisible by micro-batch size × "
                          f"data-parallel size = {t.micro_batch_size} × {dims.dp}")
    rampup = BatchRampup.from_config(t.rampup_batch_size, t.global_batch_size)
    if rampup is not None:
        rampup.check_divisible(t.micro_batch_size, dims.dp)
    if dims.vpp > 1:  # interleaved 1F1B walks micro-batches in groups of pp
        from ..pipeline.orders import check_interleaved
        for size in (rampup.sizes() if rampup is not None else [t.global_batch_size]):
            check_interleaved(dims.pp, dims.vpp, size // (t.micro_batch_size * dims.dp), t.micro_batch_size,
                              dims.dp)
    if t.precision not in DTYPES:
        raise ConfigError(f"train.precision '{t.precision}' is not one of {' | '.join(DTYPES)}")
    check_lora(cfg.lora)
    check_fsdp(cfg)
    if p.fsdp and dims.dp == 1:
        raise LayoutError(f"--fsdp shards over data-parallel ranks, and this layout has dp 1 (world {world_size}, "
                          f"tp {dims.tp}); use --nproc {2 * world_size} or drop --fsdp")
    o = cfg.optim
    if o.min_lr > o.lr:  # Megatron asserts max_lr >= min_lr: a schedule floor above the peak trains at min_lr
        raise ConfigError(f"optim.min_lr {o.min_lr:g} is above optim.lr {o.lr:g}, so the schedule would train at "
                          f"{o.min_lr:g}: pass --set optim.min_lr={o.lr:g} (or any value <= the lr)")
    if m.vocab_size is not None and m.vocab_size < 2:
        raise ValueError("model.vocab_size must be at least 2")
    return dims


class Trainer:
    def __init__(self, cfg: RunConfig, spec, train_data, valid_data=None, world_size: int = 1,
                 device="cpu", logger=None) -> None:
        self.cfg, self.spec, self.train_data, self.valid_data = cfg, spec, train_data, valid_data
        self.device = torch.device(device)
        self.dims = parallel_dims(cfg, world_size)
        timeout = None
        if world_size > 1:
            import datetime
            timeout = datetime.timedelta(seconds=cfg.parallel.timeout_s)
        self.state = build_state(self.dims, timeout=timeout)
        seed_everything(cfg.train.seed, self.state.tp_rank, self.state.pp_rank, self.device.type)
        dtype = build_dtype(cfg, DTYPES[cfg.train.precision])  # --fsdp: fp32 shards, bf16 compute copies
        self.stages = rank_stages(cfg.model.stage_layers, self.dims.pp, self.dims.vpp, self.state.pp_rank,
                                  cfg.parallel.pipeline_layers)
        self.chunks = [spec.build_chunk(self.state, st, self.device, dtype) for st in self.stages]
        self.model = self.chunks[0] if len(self.chunks) == 1 else torch.nn.ModuleList(self.chunks)
        self.lora = self._apply_lora() if cfg.lora.rank else None
        if cfg.train.precision == "fp8":
            from ..models.fp8 import apply_fp8, check_fp8, fp8_mode_line
            check_fp8(cfg.model.stage_layers)
            for c in self.chunks:
                apply_fp8(c, cfg.model.stage_layers)
            self.say(fp8_mode_line(self.device, cfg.model.stage_layers))
        if cfg.parallel.recompute != "none":
            from ..parallel.recompute import apply_recompute
            for c in self.chunks:
                apply_recompute(c, cfg.parallel)
        if cfg.train.compile:
            compile_blocks(self.chunks, COMPILE_BACKEND)
        if cfg.parallel.fsdp:
            apply_fsdp(self.chunks, self.state, cfg.train.precision, self.device.type, (TransformerBlock,))
            self.optimizer = FSDPOptimizer(self.model, cfg.optim, self.state)
        else:
            self.optimizer = DistributedOptimizer(self.model, cfg.optim, self.state,
                                                  distributed=cfg.parallel.distributed_optimizer,
                                                  bucket_mb=cfg.parallel.dp_bucket_mb)
        self.scaler = LossScaler(cfg.train.initial_loss_scale, cfg.train.min_loss_scale,
                                 cfg.train.loss_scale_window, cfg.train.hysteresis,
                                 dynamic=cfg.train.precision == "fp16")
        self.schedule = get_schedule(self.state)
        self.rampup = BatchRampup.from_config(cfg.train.rampup_batch_size, cfg.train.global_batch_size)
        self.step = 0  # optimizer steps completed
        self.consumed_samples = 0  # training samples of those steps (checkpointed; the ramp-up follows it)
        self.logger = logger
        self.stop_requested = False
        self.eval_metrics: dict = {}
        self.pending_save = None  # an --async-save checkpoint still being written (checkpoint.async_save)

    # --------------------------------------------------------------------------------------- helpers
    @property
    def is_logging_rank(self) -> bool:
        return self.state.rank == 0

    def say(self, line: str) -> None:
        """One line on stderr from rank 0 (what the run log shows about how it trains)."""
        if self.state.rank == 0:
            print(line, file=sys.stderr, flush=True)

    def _apply_lora(self) -> dict:
        """Adapters on every chunk, the pretrained weights frozen (parameters the spec reports missing from
        its checkpoint, a task's new head among them, train in full); the counts go to the run log. The base
        the adapters apply to is the checkpoint the spec loaded (``spec.source``), None for the seeded
        initialisation of ``model.*``."""
        lc = self.cfg.lora
        keep = getattr(self.spec, "missing", ()) or ()
        infos = [apply_lora(c, lc, self.state, self.cfg.train.seed, keep=keep) for c in self.chunks]
        counts = parameter_counts(self.chunks, self.state, self.cfg.model.tie_embeddings)
        total = counts["trainable"] + counts["frozen"]
        base = getattr(self.spec, "source", None)
        self.say(f"mwb: LoRA rank {lc.rank} (alpha {lc.alpha if lc.alpha is not None else lc.rank:g}, dropout "
                 f"{lc.dropout:g}) on {lc.targets}: {counts['trainable']:,} trainable parameters of {total:,} "
                 f"({100.0 * counts['trainable'] / max(total, 1):.2f}%); the base "
                 f"({base or 'the seeded initialisation'}) is frozen")
        return {"base": os.path.abspath(base) if base and os.path.exists(base) else base,
                "prefixes": sorted({p for i in infos for p in i.prefixes}), **counts}

    def global_batch_size(self) -> int:
        """The global batch of the next step: constant, or the ramp-up's size at the samples consumed."""
        if self.rampup is None:
            return self.cfg.train.global_batch_size
        return self.rampup.batch_size(self.consumed_samples)

    def _microbatches(self, dataset, step: int, start: Optional[int] = None,
                      global_batch: Optional[int] = None) -> list[dict]:
        t = self.cfg.train
        gbs = global_batch or t.global_batch_size
        return microbatches_from(dataset, step * gbs if start is None else start, gbs, t.micro_batch_size,
                                 self.dims.dp, self.state.dp_rank, self.device)

    def _sum_over_loss_ranks(self, buf: torch.Tensor) -> torch.Tensor:
        """``buf`` summed over the ranks that hold losses (last stage, TP rank 0: one per data-parallel
        replica); every other rank's copy counts as zeros."""
        st = self.state
        if not (st.is_last_stage and st.tp_rank == 0):
            buf = torch.zeros_like(buf)
        if self.dims.world_size > 1:
            dist.all_reduce(buf)
        return buf

    def _global_loss(self, loss_sum: torch.Tensor, count: torch.Tensor) -> tuple[float, float]:
        """Σ loss and Σ tokens over the global batch."""
        buf = self._sum_over_loss_ranks(torch.stack([loss_sum, count]).double().to(self.device))
        return float(buf[0]), float(buf[1])

    def _global_metrics(self) -> dict:
        """The spec's loss components since its last reset, each Σ value / Σ count over the global batch."""
        names = self.spec.metric_names
        if not names:
            return {}
        buf = self._sum_over_loss_ranks(self.spec.metric_sums(self.device))
        return {n: float(buf[i, 0] / buf[i, 1].clamp(min=1.0)) for i, n in enumerate(names)}

    def _set_train(self, mode: bool) -> None:
        for c in self.chunks:
            c.train(mode)

    # ------------------------------------------------------------------------------------------ step
    def train_step(self) -> StepResult:
        cfg, t0 = self.cfg, time.perf_counter()
        self._set_train(True)
        gbs = self.global_batch_size()
        start = self.consumed_samples if self.rampup is not None else None  # None: step · global batch
        mbs = self._microbatches(self.train_data, self.step, start=start, global_batch=gbs)
        nominal = self.spec.nominal_count(cfg.train.micro_batch_size, cfg.train.seq_length) * \
            len(mbs) * self.dims.dp
        self.optimizer.zero_grad()
        scale = self.scaler.scale
        moe_on = bool(cfg.model.num_experts)
        if moe_on:  # aux-loss gradients scaled by loss_scale / micro-batches of the global batch
            from ..parallel.expert import begin_moe_step
            begin_moe_step(scale, len(mbs) * self.dims.dp)
        self.spec.reset_metrics()
        loss_sum, count = self.schedule(self.chunks, mbs, self.spec, self.state, scale / nominal,
                                        seq_length=cfg.train.seq_length,
                                        micro_batch_size=cfg.train.micro_batch_size)
        total, tokens = self._global_loss(loss_sum, count)
        lr = lr_at(self.step, cfg.optim, cfg.train.steps)
        grad_scale = nominal / max(tokens, 1.0)
        updated, norm = self.optimizer.step(lr, loss_scale=scale, grad_scale=grad_scale)
        self.scaler.update(not updated)
        self.step += 1
        self.consumed_samples += gbs
        ntok = sum(self.spec.tokens_in(b) for b in mbs) * self.dims.dp
        extra = {"global_batch_size": gbs, **self._global_metrics()}
        if moe_on:
            from ..parallel.expert import moe_step_metrics
            extra.update(moe_step_metrics(self.state, len(mbs) * self.dims.dp))
        return StepResult(self.step, total / max(tokens, 1.0), lr, norm, ntok, time.perf_counter() - t0,
                          scale, not updated, extra)

    @torch.no_grad()
    def evaluate(self, steps: Optional[int] = None) -> float:
        """Mean token loss over ``steps`` global batches of the validation set (the spec's loss components
        over the same batches are left in ``self.eval_metrics``)."""
        if self.valid_data is None:
            return float("nan")
        self._set_train(False)
        total = tokens = 0.0
        self.spec.reset_metrics()
        for k in range(steps or self.cfg.train.eval_steps):
            mbs = self._microbatches(self.valid_data, k)
            ls, n = self.schedule(self.chunks, mbs, self.spec, self.state, 1.0, forward_only=True,
                                  seq_length=self.cfg.train.seq_length,
                                  micro_batch_size=self.cfg.train.micro_batch_size)
            a, b = self._global_loss(ls, n)
            total, tokens = total + a, tokens + b
        self.eval_metrics = self._global_metrics()
        self._set_train(True)
        return total / max(tokens, 1.0)

    # ------------------------------------------------------------------------------------------- run
    def install_signal_handlers(self) -> None:
        def handler(signum, frame):
            self.stop_requested = True
            note_stop_signal(signum)
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, handler)
            except ValueError:  # not in the main thread
                pass

    def stop_agreed(self) -> bool:
        """All ranks stop at the same step if any rank was asked to."""
        flag = torch.tensor([1.0 if self.stop_requested else 0.0], device=self.device)
        if self.dims.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def run(self, callback=None) -> list[StepResult]:
        """Train until ``train.steps``; ``callback(trainer, result)`` after every step (logging,
        evaluation, checkpoints). Stops early, after a checkpoint by the callback, on SIGTERM/SIGINT."""
        history = []
        while self.step < self.cfg.train.steps:
            res = self.train_step()
            if not math.isfinite(res.loss):
                res.extra["nonfinite_loss"] = True
            history.append(res)
            stop = self.stop_agreed()
            if callback is not None:
                callback(self, res, stop)
            if stop:
                break
        wait_for_save(self)  # --async-save: the last checkpoint is whole (and its errors raised) before returning
        return history
