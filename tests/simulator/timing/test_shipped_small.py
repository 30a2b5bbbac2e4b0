"""The engine on small problems it was never fitted on, against Nsight Compute's kernel times."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flashscope.simulator.calibrate.validation import simulate_config
from flashscope.simulator.core.hardware import from_name

PATH = (
    Path(__file__).resolve().parents[3]
    / "benchmarks"
    / "results"
    / "small-problems-h100-2026-11-21.json"
)


def test_small_forward_kernels_match_nsight_compute():
    """benchmarks/sweeps/small-problems.json on an H100: 20 forward problems of 1 to 32 heads
    (4 CTAs to a few waves). do_bench times the host there, so the kernel's span is compared
    with Nsight Compute's kernel time: within 10% on average, 20% at worst (6.1% and +14.3%
    with the shipped calibration). One head at N = 512 is the case a fitted per-launch cost
    would hide: its kernel alone is 12 µs."""
    doc = json.loads(PATH.read_text())
    gpu = from_name("h100-sxm")
    errs = []
    for r in doc["rows"]:
        if r["config"]["algo"] != "fa2":
            continue
        kernels = r["measured"]["ncu"]["kernels"]
        assert len(kernels) == 1, r["id"]
        measured = kernels[0]["gpu__time_duration.sum"] * 1e-9  # ns
        k = simulate_config(r["config"], gpu).kernels[0]
        errs.append((float(k.end.max() - k.start.min()) / measured - 1, r["id"]))
    assert len(errs) == 20
    mape = float(np.mean([abs(e) for e, _ in errs]))
    worst = max(errs, key=lambda e: abs(e[0]))
    assert mape < 0.10 and abs(worst[0]) < 0.20, (mape, worst)
