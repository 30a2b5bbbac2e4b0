"""Fit the FA-3 model's per-phase terms (`simulator/timing/fa3.py`, `Fa3Terms`) on the fit half
of the measured rows (`fa3_rows.held_out` is false) together with the recorded timelines.

The loss is the mean absolute log ratio of model to measured time over the fit half's rows,
plus TIMELINE_WEIGHT times that of the timelines' phase lengths (`fa3_timelines`; each length
offset by PHASE_FLOOR_NS so that a wait of a few ns measured against none modelled does not
dominate; the causal timelines add their last, masked, block's softmax, CAUSAL_PHASES). The
search is `fitting`'s: Nelder–Mead, then coordinate steps, deterministic.
Held-out rows never enter it, nor rows of a head_dim outside FIT_HEAD_DIMS: the d = 256 rows
(benchmarks/results/hopper-forward-d256-*.json) were measured after the terms were first
fitted and stay an out-of-sample check on both sides of the split.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from flashscope.simulator.calibrate.fa3_rows import compare, group, held_out, model_times
from flashscope.simulator.calibrate.fa3_timelines import compare_phases
from flashscope.simulator.calibrate.fitting import Param, _minimize
from flashscope.simulator.timing.fa3 import TERMS, Fa3Terms

PARAMS = (
    Param("tensor", 0.7, 1.0),
    Param("mma_latency_ns", 1.0, 200.0, log=True),
    Param("softmax_ops_per_clk", 24.0, 200.0, log=True),
    Param("kv_latency_ns", 100.0, 2500.0, log=True),
    Param("copy_gbs", 15.0, 150.0, log=True),
    Param("softmax_ns", 0.0, 600.0),
    Param("barrier_ns", 0.0, 200.0),
    Param("mma_drag", 0.0, 0.8),
    Param("mask_ops", 1.0, 30.0, log=True),
)
TIMELINE_WEIGHT = 0.5
PHASE_FLOOR_NS = 100.0
FIT_HEAD_DIMS = (64, 128)
FITTED_PHASES = ("wait_k", "qk", "softmax", "pv", "load_k", "load_v")
CAUSAL_PHASES = ("softmax_last",)  # fitted on the causal timelines only: a masked block


def loss(
    terms: Fa3Terms,
    rows: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    pinned: frozenset[str],
) -> float:
    """The fit's loss for `terms` (fit-half rows only)."""
    fit_rows = [
        r for r in rows if r["head_dim"] in FIT_HEAD_DIMS and not held_out(group(r), pinned)
    ]
    times = model_times(fit_rows, terms)
    from flashscope.simulator.calibrate.fa3_rows import _sim_key

    row_loss = float(np.mean([abs(math.log(times[_sim_key(r)] / r["ms"])) for r in fit_rows]))
    if not runs:
        return row_loss
    phase = []
    for cmp in compare_phases(runs, terms=terms):
        for name in FITTED_PHASES + (CAUSAL_PHASES if cmp["causal"] else ()):
            m, s = cmp["measured"][name], cmp["model"][name]
            phase.append(abs(math.log((s + PHASE_FLOOR_NS) / (m + PHASE_FLOOR_NS))))
    return row_loss + TIMELINE_WEIGHT * float(np.mean(phase))


def fit(
    rows: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    pinned: frozenset[str],
    max_evals: int = 200,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Fa3Terms, float, float]:
    """The terms that minimise `loss` from TERMS; (terms, loss, loss at TERMS)."""

    def f(values: dict[str, float | int]) -> float:
        return loss(dataclasses.replace(TERMS, **cast(dict[str, Any], values)), rows, runs, pinned)

    start = np.array([p.to_unit(getattr(TERMS, p.name)) for p in PARAMS])
    best, best_loss, start_loss, _ = _minimize(PARAMS, f, [start], max_evals, progress)
    return dataclasses.replace(TERMS, **cast(dict[str, Any], best)), best_loss, start_loss


__all__ = ["FIT_HEAD_DIMS", "PARAMS", "compare", "fit", "loss"]
