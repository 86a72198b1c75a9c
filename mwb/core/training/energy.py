"""Energy and carbon of a run: measured where the hardware reports it, otherwise a declared estimate.

Sources, best first:
  * Linux RAPL (``/sys/class/powercap/<zone>/energy_uj``) for the CPU packages: a cumulative micro-joule
    counter per package that wraps at ``max_energy_range_uj``, so it is read every step and a decrease is
    counted as a wrap. Only package zones are summed (their ``core``/``dram`` sub-zones and the MMIO copy
    of the same package would count the same energy twice). RAPL measures the whole package, other
    processes included.
  * NVML's total-energy counter (milli-joules since the driver loaded, Volta and newer) for the CUDA
    device this process uses, through ``pynvml`` when it is installed.
  * Otherwise an estimate: ``cpu_tdp_w`` × this process's share of the machine's CPU time (process CPU
    seconds / logical CPUs), plus ``gpu_tdp_w`` for the wall time when a GPU is used without NVML.
CO2e = kWh × ``grid_gco2_per_kwh`` (default 475 g/kWh, the world-average carbon intensity of electricity
generation in the IEA's Global Energy & CO2 Status Report 2019). Joules to kWh: 1 kWh = 3.6e6 J.
"""
from __future__ import annotations

import glob
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..config import EnergyConfig

J_PER_KWH = 3.6e6
POWERCAP = "/sys/class/powercap"


def kwh(joules: float) -> float:
    return joules / J_PER_KWH


def co2e_grams(joules: float, grid_gco2_per_kwh: float) -> float:
    return kwh(joules) * grid_gco2_per_kwh


def tdp_estimate_joules(tdp_w: float, seconds: float, utilisation: float) -> float:
    """Declared power × busy fraction × time; utilisation is clamped to [0, 1]."""
    return tdp_w * min(max(utilisation, 0.0), 1.0) * seconds


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class RaplCounter:
    """Σ energy of the CPU package zones under ``root``, in joules since construction, wraps handled."""

    def __init__(self, root: str = POWERCAP) -> None:
        self.zones: list[tuple[str, int]] = []  # (energy_uj path, max_energy_range_uj)
        for zone in sorted(glob.glob(os.path.join(root, "*"))):
            base = os.path.basename(zone)
            if not re.fullmatch(r"[a-z-]*rapl:\d+", base) or "mmio" in base:
                continue  # sub-zones (intel-rapl:0:1) and the MMIO view of a package
            try:
                with open(os.path.join(zone, "name")) as f:
                    if not f.read().strip().startswith("package"):
                        continue  # psys covers the whole platform, packages included
            except OSError:
                pass
            uj = _read_int(os.path.join(zone, "energy_uj"))
            wrap = _read_int(os.path.join(zone, "max_energy_range_uj"))
            if uj is not None and wrap:
                self.zones.append((os.path.join(zone, "energy_uj"), wrap))
        self._last = [_read_int(p) for p, _ in self.zones]
        self._uj = 0

    @property
    def available(self) -> bool:
        return bool(self.zones)

    def joules(self) -> float:
        for i, (path, wrap) in enumerate(self.zones):
            now = _read_int(path)
            if now is None:
                continue
            last = self._last[i]
            self._uj += now - last if now >= last else now + wrap - last
            self._last[i] = now
        return self._uj / 1e6


class NvmlCounter:
    """NVML total energy of one GPU, in joules since construction (None when NVML cannot tell)."""

    def __init__(self, index: int) -> None:
        self.handle = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
            self._start = pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception:  # no pynvml, no driver, or a GPU older than Volta
            self.handle = None

    @property
    def available(self) -> bool:
        return self.handle is not None

    def joules(self) -> float:
        return (self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self._start) / 1e3


@dataclass
class EnergyReading:
    joules: float
    source: str

    def record(self, grid_gco2_per_kwh: float) -> dict:
        return {"energy_j": self.joules, "energy_kwh": kwh(self.joules),
                "co2e_g": co2e_grams(self.joules, grid_gco2_per_kwh)}


class EnergyMeter:
    """Cumulative energy of this run since construction; ``scale`` multiplies estimates (ranks of a run
    whose other processes this one cannot see)."""

    def __init__(self, cfg: EnergyConfig, cuda_index: Optional[int] = None, powercap_root: str = POWERCAP,
                 scale: float = 1.0, clock: Callable[[], float] = time.perf_counter,
                 cpu_seconds: Optional[Callable[[], float]] = None) -> None:
        self.cfg, self.scale, self.clock = cfg, scale, clock
        self.cpu_seconds = cpu_seconds or (lambda: sum(os.times()[:2]))
        self.ncpu = os.cpu_count() or 1
        self.rapl = RaplCounter(powercap_root)
        self.nvml = NvmlCounter(cuda_index) if cuda_index is not None else None
        self.gpu_estimated = cuda_index is not None and not (self.nvml and self.nvml.available)
        self._t0, self._cpu0 = self.clock(), self.cpu_seconds()
        parts = ["RAPL (CPU packages, measured)" if self.rapl.available else
                 f"estimate: {cfg.cpu_tdp_w:g} W CPU TDP × this process's CPU utilisation"
                 + (f" × {scale:g} ranks" if scale != 1 else "")]
        if cuda_index is not None:
            parts.append(f"NVML (GPU {cuda_index}, measured)" if not self.gpu_estimated else
                         f"estimate: {cfg.gpu_tdp_w:g} W GPU TDP × wall time")
        self.source = " + ".join(parts)

    def read(self) -> EnergyReading:
        wall = self.clock() - self._t0
        if self.rapl.available:
            joules = self.rapl.joules()
        else:
            util = (self.cpu_seconds() - self._cpu0) / max(wall * self.ncpu, 1e-9)
            joules = tdp_estimate_joules(self.cfg.cpu_tdp_w, wall, util) * self.scale
        if self.nvml is not None and not self.gpu_estimated:
            joules += self.nvml.joules()
        elif self.gpu_estimated:
            joules += tdp_estimate_joules(self.cfg.gpu_tdp_w, wall, 1.0) * self.scale
        return EnergyReading(joules, self.source)

    def summary_line(self, reading: EnergyReading) -> str:
        r = reading.record(self.cfg.grid_gco2_per_kwh)
        return (f"energy {r['energy_j']:,.0f} J = {r['energy_kwh']:.4g} kWh, {r['co2e_g']:.3g} gCO2e at "
                f"{self.cfg.grid_gco2_per_kwh:g} gCO2e/kWh (source: {reading.source})")


def plan_energy(train_flops: float, gpus: int, peak_tflops: float, mfu: float, device_power_w: float,
                grid_gco2_per_kwh: float, pue: float = 1.0) -> dict:
    """Energy of a planned run: it takes train_flops / (gpus · peak · MFU) seconds, each GPU drawing
    ``device_power_w`` (TDP: an upper bound on the GPUs alone), times the datacentre's PUE."""
    seconds = train_flops / (gpus * peak_tflops * 1e12 * mfu)
    joules = seconds * gpus * device_power_w * pue
    return {"train_flops": train_flops, "seconds": seconds, "gpu_hours": seconds * gpus / 3600.0,
            "energy_j": joules, "energy_kwh": kwh(joules), "energy_mwh": kwh(joules) / 1e3,
            "co2e_t": co2e_grams(joules, grid_gco2_per_kwh) / 1e6, "mfu": mfu,
            "device_power_w": device_power_w, "pue": pue, "grid_gco2_per_kwh": grid_gco2_per_kwh}
