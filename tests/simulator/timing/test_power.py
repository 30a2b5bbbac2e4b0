"""The power cap: the boost clock a launch keeps, and its fit from sustained against single
launches (engine.boost, engine.clock_share, fitting.fit_power, validation.clock_samples)."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from flashscope.simulator.calibrate.fitting import ClockSample, fit_power, power_loss
from flashscope.simulator.calibrate.validation import clock_samples
from flashscope.simulator.core.hardware import custom, from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import boost, clock_share, simulate_workload


def _capped(gpu, tflops: float, l2_tbs: float, exp: float):
    return custom(gpu, power_tflops=tflops, power_l2_tbs=l2_tbs, power_exp=exp)


def test_no_cap_modelled_changes_nothing():
    gpu = from_name("h200", calibrated=False)
    assert gpu.efficiency.power_exp == 0.0
    assert boost(gpu) == 1.0
    assert clock_share(gpu.efficiency, 1e15, 1e15, 1e-3) == 1.0
    # a cap the matrix-product ceiling stays under: no headroom above the measured rate
    high = _capped(gpu, 10_000.0, 10.0, 0.3)
    assert boost(high) == 1.0


def test_boost_is_the_ceilings_own_fixed_point():
    """The measured ceiling R ran at the cap: at b·R its demand, to the -γ, gives back 1/b."""
    gpu = from_name("h200", calibrated=False)
    rate = gpu.tensor_flops("fp16") * gpu.efficiency.tensor / 1e12
    for _ in range(20):
        tf, exp = random.uniform(0.3, 0.95) * rate, random.uniform(0.05, 0.8)
        b = boost(_capped(gpu, tf, 10.0, exp))
        assert b > 1.0
        assert (b * rate / tf) ** -exp == pytest.approx(1.0 / b, rel=1e-9)


def test_clock_falls_with_demand_above_the_cap():
    eff = _capped(from_name("h100-sxm", calibrated=False), 400.0, 12.0, 0.25).efficiency
    span = 1e-3
    under = clock_share(eff, 0.3e12 * 400 * span, 0.3e12 * 12 * span, span)  # demand 0.6
    assert under == 1.0
    demand = random.uniform(1.1, 3.0)
    f = random.uniform(0.0, 1.0)  # the demand's share from the tensor cores
    flops, l2 = f * demand * 400e12 * span, (1 - f) * demand * 12e12 * span
    assert clock_share(eff, flops, l2, span) == pytest.approx(demand**-0.25, rel=1e-12)
    assert clock_share(eff, 1.5 * flops, l2, span) < clock_share(eff, flops, l2, span)
    assert clock_share(eff, flops, 1.5 * l2 + 1, span) < clock_share(eff, flops, l2, span)


def test_a_capped_launch_is_its_boost_clock_run_slowed_by_its_clock():
    base = from_name("h200", calibrated=False)
    p = AttentionProblem(seq_q=random.choice([2048, 3000]), head_dim=128, batch=2, heads=16)
    w = kernelplan.build("fa2", p, TileConfig(128, 128, 3, 8))
    capped = _capped(base, 450.0, 13.0, random.uniform(0.15, 0.4))
    b = boost(capped)
    assert b > 1.0
    # the same GPU at the boost clock, with no cap: the tensor ceiling b times higher
    at_boost = custom(base, tensor=base.efficiency.tensor * b)
    fast = simulate_workload(w, at_boost).kernels[0]
    slow = simulate_workload(w, capped).kernels[0]
    gap = base.efficiency.launch_us * 1e-6
    span = fast.time_s - gap
    (launch,) = w.launches
    l2 = float(launch.read_bytes.sum() + launch.write_bytes.sum())
    clock = clock_share(capped.efficiency, float(launch.flops.sum()), l2, span)
    assert 0.5 < clock < 1.0
    assert slow.clock == pytest.approx(clock, rel=1e-12)
    assert fast.clock == 1.0
    assert slow.time_s - gap == pytest.approx(span / clock, rel=1e-9)
    assert slow.end.max() - slow.start.min() == pytest.approx(span / clock, rel=1e-9)
    assert sum(slow.breakdown.values()) == pytest.approx(slow.time_s, rel=1e-9)
    # bytes do not depend on the clock
    assert slow.dram_read_bytes == fast.dram_read_bytes


def test_fit_power_recovers_the_cap_that_made_the_samples():
    rng = np.random.default_rng(random.randrange(2**32))
    truth = {"power_tflops": 450.0, "power_l2_tbs": 13.0, "power_exp": 0.27}
    eff = from_name("h200", calibrated=False).efficiency
    true_eff = dataclasses.replace(eff, **truth)
    samples = []
    for i in range(60):
        single = rng.uniform(1e-4, 5e-3)
        flops = rng.uniform(150, 650) * 1e12 * single
        l2 = rng.uniform(1.0, 8.0) * 1e12 * single
        slow = 1 / clock_share(true_eff, flops, l2, single)
        samples.append(ClockSample(f"k{i}", flops, l2, single, single * slow))
    assert power_loss(eff, samples) > 0.02  # no cap: the slowdowns go unexplained
    got = fit_power(eff, samples)
    assert got.loss < 0.1 * got.start_loss
    assert got.loss < 2e-3
    assert got.mape_pct < 0.5  # each slowdown predicted within about half a per cent
    fitted = dataclasses.replace(eff, **got.values)
    for s in samples:  # the fitted cap predicts each slowdown as the true one does
        want = 1 / clock_share(true_eff, s.flops, s.l2_bytes, s.single_s)
        have = 1 / clock_share(fitted, s.flops, s.l2_bytes, s.single_s)
        assert math.log(have / want) == pytest.approx(0.0, abs=0.01)


def test_clock_samples_take_one_kernel_rows_timed_both_ways():
    gpu = from_name("h200")
    cfg = {"algo": "fa2", "impl": "flashscope", "batch": 2, "heads": 8, "seq": 1000,
           "head_dim": 64, "causal": True, "dtype": "fp16", "block_m": 128, "block_n": 64,
           "stages": 3, "warps": 4, "gpu": "h200"}  # fmt: skip
    alone = random.uniform(50.0, 500.0)
    one = {"id": "a", "config": cfg, "measured_us": 1.1 * alone,
           "measured": {"ncu": {"kernels": [{"gpu__time_duration.sum": alone * 1e3}]}}}  # fmt: skip
    untimed = {"id": "b", "config": cfg, "measured_us": 100.0, "measured": {}}
    bwd = {**one, "id": "c", "config": {**cfg, "algo": "fa2-bwd"}}  # several launches
    (s,) = clock_samples([one, untimed, bwd], gpu)
    p = AttentionProblem(seq_q=1000, head_dim=64, batch=2, heads=8, causal=True)
    (launch,) = kernelplan.build("fa2", p, TileConfig(128, 64, 3, 4)).launches
    assert s.id == "a"
    assert s.flops == float(launch.flops.sum())
    assert s.l2_bytes == float(launch.read_bytes.sum() + launch.write_bytes.sum())
    assert s.single_s == pytest.approx(alone * 1e-6)
    assert s.sustained_s / s.single_s == pytest.approx(1.1)


def test_power_fields_are_checked():
    eff = from_name("h200", calibrated=False).efficiency
    for bad in ({"power_exp": 1.0}, {"power_tflops": 0.0}, {"power_l2_tbs": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            dataclasses.replace(eff, **bad)
