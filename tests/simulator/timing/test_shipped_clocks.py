"""The shipped power cap against the SM clocks read on a GPU (benchmarks/clocks.py)."""

from __future__ import annotations

import numpy as np

from flashscope.simulator.core.hardware import from_name


def test_the_shipped_h200_calibration_predicts_the_clocks_read_on_the_gpu():
    """benchmarks/clocks.py read the SM clock of each forward tile run back to back on an H200;
    the power cap, fitted only from sustained against single-launch times, predicts them."""
    import json
    from pathlib import Path

    from flashscope.simulator.calibrate.validation import simulate_config

    results = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
    path = results / "clocks-NVIDIA-H200-2026-11-21.json"
    doc = json.loads(path.read_text())
    top = float(doc["max_sm_mhz"])
    gpu = from_name("h200")
    errs = []
    for r in doc["rows"]:
        clock = simulate_config(r["config"], gpu).kernels[0].clock
        errs.append(clock / (r["sm_mhz"] / top) - 1)
    errs = np.abs(errs)
    assert len(errs) == 40
    # worst: the d = 128 64×128 two-stage tile, which the GPU runs at its top clock and the
    # engine at 0.91-0.95 of it (its boost-clock span is short and the clock makes up for it);
    # 5.6% before the engine took its loops' waits from the PTX, 8.4% after (docs/timing-model.md)
    assert errs.mean() < 0.03 and errs.max() < 0.09, (errs.mean(), errs.max())
