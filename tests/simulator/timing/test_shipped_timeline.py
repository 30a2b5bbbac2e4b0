"""The engine's schedule against the forward kernel's measured one (benchmarks/timeline.py)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from flashscope.app.datasets import DATA_DIR
from flashscope.app.figures.report import resident_per_sm
from flashscope.simulator.calibrate.validation import simulate_config
from flashscope.simulator.core.hardware import from_name

RESULTS = DATA_DIR
RECORDED = {  # file → (GPU preset, forward rows recorded in the default launch order)
    "timeline-NVIDIA-H200-2026-11-21-n1024-n4096.json.gz": ("h200", 40),
    "timeline-NVIDIA-H100-80GB-HBM3-2026-11-21-n512-n1024-n4096.json.gz": ("h100-sxm", 60),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_simulated_co_residency_matches_the_measured_schedules(name):
    """Per recorded configuration (the dataset's 20 forward tiles at each recorded N, in the
    kernels' own launch order), CTAs resident per SM on average, simulated against measured,
    within 5%; measured, they range from 0.93 (one CTA per SM and a tail) to 4.86 (the 64×32
    tile)."""
    key, count = RECORDED[name]
    doc = json.loads(gzip.decompress((RESULTS / name).read_bytes()))
    gpu = from_name(key)
    got = []
    for rec in doc["records"]:
        if rec["band"] != 1:  # the kernels' default order, the one the engine schedules
            continue
        assert rec["config"]["gpu"] == key
        k = simulate_config(rec["config"], gpu).kernels[0]
        measured = resident_per_sm(np.array(rec["start_us"]), np.array(rec["end_us"]), gpu.sms)
        simulated = resident_per_sm(k.start, k.end, gpu.sms)
        got.append((rec["id"], simulated / measured - 1))
    assert len(got) == count
    worst = max(got, key=lambda g: abs(g[1]))
    assert abs(worst[1]) < 0.05, worst
