"""Where the numbers a user sees go: ``metrics.jsonl``, TensorBoard, a progress bar and ``loss.png``.

Only rank 0 logs; every number comes from the :class:`~mwb.core.training.trainer.StepResult` computed once
by the trainer. Model FLOPs per token use the standard 6·N + attention estimate (Kaplan/Megatron:
forward + backward = 3× forward, forward = 2·N + 2·L·s·h per token), and MFU divides achieved FLOP/s by the
configured peak. Every step record carries the run's energy so far (joules, kWh, gCO2e); at the end the
run's total goes to ``energy.json`` and one printed line that names the source (:mod:`.energy`).
``trackers`` (``--log``): every record written to ``metrics.jsonl``, the run's ``config.yaml`` and the energy
summary also go to W&B / MLflow / TensorBoard (:mod:`.tracking`).
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Optional, Sequence

import torch

from ..atomic import atomic_open, atomic_write_json
from ..config import EnergyConfig
from .energy import EnergyMeter
from .tracking import FanOut, open_trackers


def flops_per_token(n_params_nonembed: int, num_layers: int, seq_length: int, hidden: int) -> float:
    """Training FLOPs per token (no recompute): 6·N + 6·L·s·h (attention scores and values)."""
    return 6.0 * n_params_nonembed + 6.0 * num_layers * seq_length * hidden


class MetricsLogger:
    def __init__(self, out_dir: str, total_steps: int, enabled: bool, tensorboard: bool = True,
                 progress: bool = True, flops_per_tok: Optional[float] = None, peak_tflops: Optional[float] = None,
                 world_size: int = 1, start_step: int = 0, log_interval: int = 10,
                 energy: Optional[EnergyConfig] = None, trackers: Sequence[str] = ()) -> None:
        self.enabled, self.out_dir = enabled, out_dir
        self.total_steps, self.log_interval = total_steps, max(int(log_interval), 1)
        self.flops_per_tok, self.peak = flops_per_tok, peak_tflops
        self.world_size = world_size
        self.train_points: list[tuple[int, float]] = []
        self.valid_points: list[tuple[int, float]] = []
        self.tb = None
        self.bar = None
        self.plain = False
        self.meter: Optional[EnergyMeter] = None
        self.summary: dict = {}
        self._last_j = 0.0
        self._steps = 0
        self.tracker = FanOut()
        if not enabled:
            return
        tensorboard = tensorboard or "tensorboard" in trackers  # already written by default: --log only ensures it
        cuda = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.meter = EnergyMeter(energy or EnergyConfig(), cuda_index=cuda, scale=float(world_size))
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "metrics.jsonl")
        if start_step > 0 and os.path.exists(path):  # resume: keep only steps before the resumed one
            self._truncate(path, start_step)
        self.file = open(path, "a")
        self.tracker = open_trackers([t for t in trackers if t != "tensorboard"], out_dir, config=_run_config(out_dir))
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(os.path.join(out_dir, "tensorboard"))
            except Exception as e:  # tensorboard missing or broken: keep training, say so once
                print(f"mwb: TensorBoard logging disabled ({e})", file=sys.stderr)
        if progress:
            from tqdm import tqdm
            self.bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step",
                            dynamic_ncols=True, file=sys.stderr, disable=None)
            if self.bar.disable:  # not a terminal (a log file, a batch job): plain lines every log_interval
                self.bar = None
                self.plain = True

    def _truncate(self, path: str, start_step: int) -> None:
        keep = []
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("step", 0) <= start_step:
                    keep.append(line if line.endswith("\n") else line + "\n")
                    if "split" not in rec:
                        self.train_points.append((rec["step"], rec["loss"]))
                    elif "loss" in rec:
                        self.valid_points.append((rec["step"], rec["loss"]))
        with atomic_open(path, "w") as f:
            f.writelines(keep)

    def log_step(self, res, extra: Optional[dict] = None) -> dict:
        rec = {"step": res.step, "loss": res.loss, "lr": res.lr, "grad_norm": res.grad_norm,
               "tokens_per_s": res.tokens / res.seconds if res.seconds > 0 else 0.0}
        if isinstance(res.extra.get("padding"), float):  # fine-tuning samples: the documents' tokens only
            rec["nonpad_tokens_per_s"] = rec["tokens_per_s"] * (1.0 - res.extra["padding"])
        if self.flops_per_tok:
            tflops = rec["tokens_per_s"] * self.flops_per_tok / 1e12 / self.world_size
            rec["tflops_per_rank"] = tflops
            if self.peak:
                rec["mfu"] = tflops / self.peak
        if res.loss_scale != 1.0 or res.skipped:
            rec["loss_scale"] = res.loss_scale
            rec["skipped"] = res.skipped
        rec.update(res.extra)
        if extra:
            rec.update(extra)
        if not self.enabled:
            return rec
        reading = self.meter.read()
        rec["step_energy_j"] = reading.joules - self._last_j
        rec.update(reading.record(self.meter.cfg.grid_gco2_per_kwh))
        self._last_j = reading.joules
        self._steps += 1
        self.file.write(json.dumps(_finite(rec)) + "\n")
        self.file.flush()
        self.tracker.log_metrics({k: v for k, v in rec.items() if k != "step"}, res.step)
        self.train_points.append((res.step, res.loss))
        if self.tb is not None:
            for k in ("loss", "lr", "grad_norm", "tokens_per_s", "loss_scale", "mfu", "moe_aux_loss", "lm_loss",
                      "sop_loss", "padding", "nonpad_tokens_per_s"):
                if k in rec and isinstance(rec[k], (int, float)):
                    self.tb.add_scalar(f"train/{k}", rec[k], res.step)
        if self.bar is not None:
            post = {"loss": f"{res.loss:.4f}", "lr": f"{res.lr:.2e}", "gnorm": f"{res.grad_norm:.3f}",
                    "tok/s": f"{rec['tokens_per_s']:.0f}"}
            if "mfu" in rec:
                post["mfu"] = f"{rec['mfu']:.1%}"
            if "loss_scale" in rec:
                post["scale"] = f"{res.loss_scale:g}"
            post.update({k.replace("_loss", ""): f"{v:.4f}" for k, v in _components(res.extra).items()})
            self.bar.set_postfix(post, refresh=False)
            self.bar.update(1)
        elif self.plain and (res.step % self.log_interval == 0 or res.step == self.total_steps):
            line = f"step {res.step}/{self.total_steps}  loss {res.loss:.4f}  lr {res.lr:.2e}  " \
                   f"grad_norm {res.grad_norm:.3f}  tokens/s {rec['tokens_per_s']:.0f}"
            if "nonpad_tokens_per_s" in rec:
                line += f" (non-padding {rec['nonpad_tokens_per_s']:.0f}, padding {res.extra['padding']:.1%})"
            if "mfu" in rec:
                line += f"  mfu {rec['mfu']:.1%}"
            if "loss_scale" in rec:
                line += f"  loss_scale {res.loss_scale:g}"
            line += "".join(f"  {k} {v:.4f}" for k, v in _components(res.extra).items())
            print(line, file=sys.stderr, flush=True)
        return rec

    def log_valid(self, step: int, loss: float, extra: Optional[dict] = None) -> None:
        """Validation loss and perplexity, plus the model's loss components (``extra``, e.g. BERT's
        ``lm_loss``, whose perplexity is the one that means something there)."""
        if not self.enabled:
            return
        rec = {"step": step, "split": "valid", "loss": loss,
               "ppl": _ppl(loss), **(extra or {})}
        if "lm_loss" in rec:
            rec["lm_ppl"] = _ppl(rec["lm_loss"])
        self.file.write(json.dumps(_finite(rec)) + "\n")
        self.file.flush()
        self.tracker.log_metrics(_valid_keys(rec), step)
        self.valid_points.append((step, loss))
        if self.tb is not None:
            self.tb.add_scalar("valid/loss", loss, step)
            self.tb.add_scalar("valid/ppl", rec["ppl"], step)
            for k, v in (extra or {}).items():
                self.tb.add_scalar(f"valid/{k}", v, step)
        self._say(f"step {step}: valid loss {loss:.4f}  ppl {rec['ppl']:.2f}" +
                  "".join(f"  {k.replace('_', ' ')} {v:.4f}" for k, v in (extra or {}).items()))

    def log_eval(self, step: int, metrics: dict) -> None:
        """A task evaluation (e.g. dev accuracy after an epoch) as a ``"split": "valid"`` record."""
        if not self.enabled:
            return
        rec = {"step": step, "split": "valid", **metrics}
        self.file.write(json.dumps(_finite(rec)) + "\n")
        self.file.flush()
        self.tracker.log_metrics(_valid_keys(rec), step)
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(f"valid/{k}", v, step)
        self._say(f"step {step}: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))

    def _say(self, msg: str) -> None:
        """A line between progress updates: above the bar on a terminal, on stderr in plain mode."""
        if self.bar is not None:
            self.bar.write(msg)
        elif self.plain:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> Optional[str]:
        """Flush everything and draw the loss curves; returns the plot's path."""
        if not self.enabled:
            return None
        if self.bar is not None:
            self.bar.close()
        reading = self.meter.read()
        self.summary = {"steps": self._steps, **reading.record(self.meter.cfg.grid_gco2_per_kwh),
                        "grid_gco2_per_kwh": self.meter.cfg.grid_gco2_per_kwh, "energy_source": reading.source}
        path = os.path.join(self.out_dir, "energy.json")
        atomic_write_json(path, _finite(self.summary), indent=1)
        print(f"mwb: {self.meter.summary_line(reading)}", file=sys.stderr, flush=True)
        self.file.close()
        self.tracker.log_summary(self.summary)
        self.tracker.close()
        if self.tb is not None:
            self.tb.close()
        return self.plot()

    def plot(self) -> Optional[str]:
        if not self.train_points:
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(*zip(*self.train_points), label="train", lw=1)
        if self.valid_points:
            ax.plot(*zip(*self.valid_points), "o-", label="valid", lw=1.5)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend()
        path = os.path.join(self.out_dir, "loss.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _ppl(loss: float) -> float:
    return math.exp(min(loss, 50.0)) if math.isfinite(loss) else float("nan")


def _components(extra: dict) -> dict:
    """Loss components worth showing next to the loss (BERT's lm/sop losses, the MoE aux loss)."""
    return {k: v for k, v in extra.items() if k.endswith("_loss") and isinstance(v, float)}


def _finite(rec: dict) -> dict:
    """JSON has no NaN/Infinity: write them as strings so every line stays valid JSON."""
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in rec.items()}


def _valid_keys(rec: dict) -> dict:
    """A validation record's fields as the trackers name them: ``valid/<field>``."""
    return {f"valid/{k}": v for k, v in rec.items() if k not in ("step", "split")}


def _run_config(out_dir: str) -> Optional[dict]:
    """The run's ``config.yaml`` (written just before by :func:`~.run_dir.open_run`), for the trackers."""
    path = os.path.join(out_dir, "config.yaml")
    if not os.path.isfile(path):
        return None
    import yaml
    with open(path) as f:
        return yaml.safe_load(f)
