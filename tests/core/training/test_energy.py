"""Energy accounting: the arithmetic, RAPL counters (wraparound, which zones count) on a fake sysfs tree,
the TDP estimate, and the metrics logger's per-step and end-of-run energy."""
import json
import os
from types import SimpleNamespace

import pytest

from mwb.core.config import EnergyConfig
from mwb.core.training.energy import (EnergyMeter, RaplCounter, co2e_grams, kwh, plan_energy,
                                      tdp_estimate_joules)
from mwb.core.training.metrics_log import MetricsLogger


def _zone(root, name, label, uj, wrap=1000_000_000):
    d = root / name
    d.mkdir()
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{wrap}\n")
    return d


def test_arithmetic():
    assert kwh(3.6e6) == 1.0
    assert co2e_grams(7.2e6, 475.0) == pytest.approx(950.0)
    assert tdp_estimate_joules(100.0, 10.0, 0.5) == 500.0
    assert tdp_estimate_joules(100.0, 10.0, 3.0) == 1000.0  # utilisation clamped to 1


def test_rapl_sums_packages_only_and_handles_wraparound(tmp_path):
    p0 = _zone(tmp_path, "intel-rapl:0", "package-0", 999_000_000)
    p1 = _zone(tmp_path, "intel-rapl:1", "package-1", 10)
    _zone(tmp_path, "intel-rapl:0:0", "core", 5)  # sub-zone of package 0: must not count
    _zone(tmp_path, "intel-rapl-mmio:0", "package-0", 5)  # same package through MMIO
    _zone(tmp_path, "intel-rapl:2", "psys", 5)  # whole platform
    c = RaplCounter(str(tmp_path))
    assert len(c.zones) == 2
    (p0 / "energy_uj").write_text("1000000\n")  # wrapped: 1e9 - 999e6 + 1e6 = 2e6 µJ
    (p1 / "energy_uj").write_text("3000010\n")  # +3e6 µJ
    assert c.joules() == pytest.approx(5.0)
    (p0 / "energy_uj").write_text("2000000\n")
    assert c.joules() == pytest.approx(6.0)


def test_meter_uses_rapl_when_present_else_the_declared_estimate(tmp_path):
    rapl = tmp_path / "rapl"
    rapl.mkdir()
    z = _zone(rapl, "intel-rapl:0", "package-0", 0)
    m = EnergyMeter(EnergyConfig(), powercap_root=str(rapl))
    (z / "energy_uj").write_text("42000000\n")
    r = m.read()
    assert r.joules == pytest.approx(42.0) and "RAPL" in r.source
    t = {"now": 0.0, "cpu": 0.0}
    empty = tmp_path / "none"
    empty.mkdir()
    est = EnergyMeter(EnergyConfig(cpu_tdp_w=80.0), powercap_root=str(empty), clock=lambda: t["now"],
                      cpu_seconds=lambda: t["cpu"], scale=2.0)
    est.ncpu = 4
    t["now"], t["cpu"] = 10.0, 20.0  # 20 CPU-s over 10 s on 4 CPUs: 50% busy
    r = est.read()
    assert r.joules == pytest.approx(80.0 * 0.5 * 10.0 * 2.0) and "estimate" in r.source
    assert r.record(475.0)["co2e_g"] == pytest.approx(800.0 / 3.6e6 * 475.0)


def test_plan_energy_arithmetic():
    # 1e21 FLOPs on 10 GPUs of 100 TFLOP/s at 50% MFU: 2e6 s; 10 × 400 W × 2e6 s = 8e9 J
    e = plan_energy(1e21, 10, 100.0, 0.5, 400.0, 500.0)
    assert e["seconds"] == pytest.approx(2e6) and e["energy_j"] == pytest.approx(8e9)
    assert e["energy_mwh"] == pytest.approx(8e9 / 3.6e9) and e["co2e_t"] == pytest.approx(8e9 / 3.6e6 * 500 / 1e6)


def test_logger_records_energy_per_step_and_at_the_end(tmp_path, capsys):
    log = MetricsLogger(str(tmp_path), 2, enabled=True, tensorboard=False, progress=False,
                        energy=EnergyConfig(grid_gco2_per_kwh=100.0))
    for step in (1, 2):
        log.log_step(SimpleNamespace(step=step, loss=1.0, lr=1e-3, grad_norm=1.0, tokens=10, seconds=0.1,
                                     loss_scale=1.0, skipped=False, extra={}))
    log.close()
    recs = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert all({"energy_j", "energy_kwh", "co2e_g", "step_energy_j"} <= set(r) for r in recs)
    assert recs[1]["energy_j"] >= recs[0]["energy_j"] >= 0
    summary = json.load(open(tmp_path / "energy.json"))
    assert summary["steps"] == 2 and summary["grid_gco2_per_kwh"] == 100.0 and summary["energy_source"]
    err = capsys.readouterr().err
    assert "gCO2e" in err and "source:" in err and os.path.exists(tmp_path / "loss.png")
