"""The occupancy model against what Nsight Compute read for every kernel of the shipped datasets."""

from __future__ import annotations

import json

import pytest

from flashscope.app.datasets import DATA_DIR
from flashscope.simulator.calibrate.explain import measured_kernel, ncu_occupancy
from flashscope.simulator.calibrate.validation import ncu_kernels, simulate_config
from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.timing.occupancy import RESERVED_SMEM

RESULTS = DATA_DIR
DATASETS = {
    "h200": "validation-h200-2026-11-21.json",
    "h100-sxm": "validation-h100-2026-11-21.json",
}


def measured_pairs(key: str, kernels: tuple[str, ...]):
    """(row id, simulated kernel, ncu's row) for every kernel named `kernels` that ncu read."""
    gpu = from_name(key)
    for row in json.loads((RESULTS / DATASETS[key]).read_text())["rows"]:
        ncu = ncu_kernels(row)
        for k in simulate_config(row["config"], gpu).kernels:
            m = measured_kernel(k.name, ncu) if k.name in kernels else None
            if m is not None and ncu_occupancy(m) is not None:
                yield row["id"], k, m


@pytest.mark.parametrize("key", sorted(DATASETS))
def test_forward_and_dq_kernels_fit_as_many_ctas_per_sm_as_measured(key: str) -> None:
    """CTAs per SM as ncu's launch statistics limit them, and shared memory no less than the
    kernel's dynamic allocation and at most 1 KiB more (the d = 64 64×64 three-stage forward
    asks 58368 bytes: 3 CTAs, not the 4 that its tiles alone would allow)."""
    pairs = list(measured_pairs(key, ("fa2", "bwd_dq")))
    assert len(pairs) >= 140
    wrong = [
        (rid, k.name, k.occupancy.ctas_per_sm, ncu_occupancy(m))
        for rid, k, m in pairs
        if k.occupancy.ctas_per_sm != ncu_occupancy(m)
    ]
    assert not wrong, wrong[:5]
    for rid, k, m in pairs:
        got = k.occupancy.footprint.smem_bytes
        real = m["launch__shared_mem_per_block_dynamic"]
        assert real <= got <= real + RESERVED_SMEM, (rid, k.name, got, real)
