"""The FA-3 model (`simulator/timing/fa3.py`) against the warp-specialized forward's measured
times: the `ws[...]` rows of benchmarks/results/hopper-forward-*.json.

Each row names its configuration as the kernel's list (`[consumers, block_n, stages, pipeline,
ctas(, pingpong(, persistent(, band)))]`), the problem (batch, heads, seq_len for both N_q and
N_k, head_dim, causal, dtype) and the median time. Rows of benchmark switches (an impl with a
"/" suffix: whole causal blocks, tiles shared in turn) are left out: the model has no such
switch. Nothing here is fitted: the model runs with the GPU preset's calibrated efficiencies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import Fa3Config, simulate_fa3

_WS = re.compile(r"^ws\[([\d, ]+)\]$")


def config_of(impl: str) -> Fa3Config | None:
    """The configuration a row's impl names (`ws[2, 128, 2, 1, 1]`), or None for other rows."""
    m = _WS.match(impl)
    if m is None:
        return None
    consumers, block_n, stages, pipeline, ctas, *rest = (int(x) for x in m.group(1).split(","))
    pingpong, persistent, band = (*rest, *(0, 0, 1)[len(rest) :])
    return Fa3Config(
        consumers,
        block_n,
        stages,
        bool(pipeline),
        ctas,
        pingpong=bool(pingpong),
        persistent=bool(persistent),
        band=band,
    )


def measured_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Every ws row of these result files, with its GPU preset and configuration."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        gpu = hardware.resolve(data["device"])
        for row in data["rows"]:
            cfg = config_of(row["impl"])
            if cfg is not None:
                rows.append({**row, "gpu": gpu, "config": cfg, "file": path.name})
    return rows


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Model time beside measured time for every row, and the mean absolute percentage error
    (all rows, and by GPU, head_dim and causal)."""
    out = []
    gpus = {key: hardware.from_name(key) for key in {r["gpu"] for r in rows}}
    for r in rows:
        n = r["seq_len"]
        problem = AttentionProblem(
            seq_q=n,
            seq_k=n,
            head_dim=r["head_dim"],
            batch=r["batch"],
            heads=r["heads"],
            causal=r["causal"],
            dtype=r["dtype"],
        )
        model_ms = (
            simulate_fa3(
                problem, r["config"], gpus[r["gpu"]], shown_tiles=1, max_intervals=1
            ).time_ns
            / 1e6
        )
        out.append(
            {
                **{k: v for k, v in r.items() if k != "config"},
                "model_ms": model_ms,
                "error": (model_ms - r["ms"]) / r["ms"],
            }
        )
    groups: dict[str, list[float]] = {}
    for r in out:
        for key in ("all", r["gpu"], f"d{r['head_dim']}", "causal" if r["causal"] else "full"):
            groups.setdefault(key, []).append(abs(r["error"]))
    mape = {k: float(np.mean(v)) for k, v in groups.items()}
    return {"rows": out, "mape": mape, "count": len(out)}
