"""Pure functions from engine results to JSON-ready dicts: a summary and Plotly figures.

`summary` is what `flashscope simulate --json` prints and POST /api/simulate returns. The
figures (`gantt`, `limiter_bars`, `roofline`) are {"data": [...], "layout": {...}} dicts for
Plotly.newPlot; the browser draws them as they are. Times are in microseconds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from flashscope.simulator.timing.launch import Launch
from flashscope.simulator.timing.results import LIMITERS, KernelResult, SimResult


def _f(x: float) -> float | None:
    """A JSON-safe float (None for NaN or infinity)."""
    x = float(x)
    return x if math.isfinite(x) else None


def _kernel(k: KernelResult) -> dict[str, Any]:
    fp = k.occupancy.footprint
    total = k.time_s
    return {
        "name": k.name,
        "grid": list(k.grid),
        "ctas": k.n_ctas,
        "time_us": _f(total * 1e6),
        "start_us": _f((k.offset_s) * 1e6),
        "waves": _f(k.waves),
        "ctas_per_sm": k.ctas_per_sm,
        "occupancy_limiter": k.occupancy.limiter,
        "smem_bytes": fp.smem_bytes,
        "regs_per_thread": fp.regs_per_thread,
        "register_spill": fp.spills,
        "dram_read_bytes": _f(k.dram_read_bytes),
        "dram_write_bytes": _f(k.dram_write_bytes),
        "l2_read_bytes": _f(k.l2_read_bytes),
        "l2_write_bytes": _f(k.l2_write_bytes),
        "spill_l2_bytes": _f(k.spill_l2_bytes),
        "spill_dram_bytes": _f(k.spill_dram_bytes),
        "counts": dict(k.counts),
        "limiter": {lim: _f(v / total) for lim, v in k.breakdown.items()},
    }


def summary(r: SimResult) -> dict[str, Any]:
    """The run's figures: time, throughput, bytes per level, occupancy, limiters, floors."""
    main = r.main
    fl = r.floors
    counts = r.workload.totals()
    p, t = r.workload.problem, r.workload.tiles
    return {
        "algo": r.algo,
        "gpu": r.gpu.key,
        "gpu_name": r.gpu.name,
        "problem": {**p.shape(), "dtype": p.dtype},
        "tiles": {"block_m": t.block_m, "block_n": t.block_n, "stages": t.stages, "warps": t.warps},
        "splits": r.workload.splits,
        "impl": r.workload.impl,
        "route": r.workload.route,
        "time_us": _f(r.time_s * 1e6),
        "tflops": _f(r.tflops),
        "tflops_executed": _f(r.tflops_executed),
        "dram_read_bytes": _f(r.dram_read_bytes),
        "dram_write_bytes": _f(r.dram_write_bytes),
        "l2_bytes": _f(r.l2_bytes),
        "l2_read_bytes": _f(r.l2_read_bytes),
        "l2_write_bytes": _f(r.l2_write_bytes),
        "waves": _f(main.waves),
        "ctas_per_sm": main.ctas_per_sm,
        "occupancy_limiter": main.occupancy.limiter,
        "main_kernel": main.name,
        "limiter": {lim: _f(v) for lim, v in r.limiter.items()},
        "floor_us": _f(fl.floor_s * 1e6),
        "floors": {
            "tensor_us": _f(fl.tensor_s * 1e6),
            "sfu_us": _f(fl.sfu_s * 1e6),
            "memory_us": _f(fl.memory_s * 1e6),
            "compulsory_bytes": fl.compulsory_bytes,
            "bound": fl.bound,
        },
        "counts": counts,
        "kernels": [
            _kernel(k) | _compiled(w) for k, w in zip(r.kernels, r.workload.launches, strict=True)
        ],
    }


def _compiled(w: Launch) -> dict[str, Any]:
    """A Triton kernel's key in the compiled-kernel tables and where its registers and spills
    come from (compiled.SOURCES); nothing for other launches."""
    if not w.compiled_key:
        return {}
    return {"compiled": {"key": w.compiled_key, "source": w.compiled_source}}


def _shown_sms(sm: np.ndarray, sms: int, max_ctas: int) -> int:
    """How many SMs (from SM 0) to draw so that at most `max_ctas` bars are drawn (≥ 1)."""
    if len(sm) <= max_ctas:
        return sms
    per_sm = np.bincount(sm, minlength=sms)
    return max(1, int(np.searchsorted(np.cumsum(per_sm), max_ctas, side="right")))


def _cta_bars(
    name: str, sm: np.ndarray, start_us: np.ndarray, end_us: np.ndarray, shown: int
) -> dict[str, Any]:
    keep = sm < shown
    return {
        "type": "bar",
        "orientation": "h",
        "name": name,
        "y": sm[keep].tolist(),
        "base": start_us[keep].tolist(),
        "x": (end_us - start_us)[keep].tolist(),
        "customdata": np.flatnonzero(keep).tolist(),
        "hovertemplate": "CTA %{customdata} on SM %{y}<br>%{base:.1f} → +%{x:.1f} µs",
    }


def _gantt_layout(shown: int, sms: int, ctas: int) -> dict[str, Any]:
    return {
        "barmode": "overlay",
        "xaxis": {"title": {"text": "time (µs)"}},
        "yaxis": {"title": {"text": "SM"}, "autorange": "reversed"},
        "meta": {"sms_shown": shown, "sms": sms, "ctas": ctas},
    }


def gantt(r: SimResult, max_ctas: int = 20000) -> dict[str, Any]:
    """SM Gantt chart: one horizontal bar per CTA (y = SM, from start to end, µs), one trace
    per kernel. Beyond `max_ctas` CTAs only the first SMs are shown (all of their CTAs)."""
    n_total = sum(k.n_ctas for k in r.kernels)
    shown = _shown_sms(np.concatenate([k.sm for k in r.kernels]), r.gpu.sms, max_ctas)
    data = [_cta_bars(k.name, k.sm, k.start * 1e6, k.end * 1e6, shown) for k in r.kernels]
    return {"data": data, "layout": _gantt_layout(shown, r.gpu.sms, n_total)}


def measured_gantt(
    name: str,
    start_us: npt.ArrayLike,
    end_us: npt.ArrayLike,
    sm: npt.ArrayLike,
    sms: int,
    max_ctas: int = 20000,
) -> dict[str, Any]:
    """The same chart for a measured schedule (each CTA's start and end on the GPU's timer,
    µs, and its SM), from the first start."""
    start, end, on = (np.asarray(x) for x in (start_us, end_us, sm))
    t0 = float(start.min()) if start.size else 0.0
    shown = _shown_sms(on, sms, max_ctas)
    return {
        "data": [_cta_bars(name, on, start - t0, end - t0, shown)],
        "layout": _gantt_layout(shown, sms, int(start.size)),
    }


def resident_per_sm(start: npt.ArrayLike, end: npt.ArrayLike, sms: int) -> float:
    """CTAs resident per SM on average over a launch: Σ durations / (span · SMs)."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    return float((end - start).sum() / ((end.max() - start.min()) * sms))


def running(start: npt.ArrayLike, end: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """CTAs running over time, a step function from the first start: (times, count from each
    time on); an end before a start at the same instant."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    t = np.concatenate([start, end]) - (start.min() if start.size else 0.0)
    delta = np.concatenate([np.ones(start.size), -np.ones(end.size)])
    order = np.lexsort((delta, t))
    return t[order], np.cumsum(delta[order])


def running_comparison(
    measured: tuple[npt.ArrayLike, npt.ArrayLike],
    simulated: tuple[npt.ArrayLike, npt.ArrayLike],
    points: int = 2000,
) -> dict[str, Any]:
    """CTAs running on the whole GPU over time, measured against simulated: two step lines
    (µs from each launch's first start; `measured` and `simulated` are (start, end) in µs),
    each sampled at no more than `points` steps."""
    data = []
    for name, (start, end), dash in (
        ("measured", measured, "solid"),
        ("simulated", simulated, "dash"),
    ):
        t, n = running(start, end)
        if t.size > points:  # keep every step's value at evenly spaced instants
            grid = np.linspace(0.0, float(t[-1]), points)
            n = n[np.searchsorted(t, grid, side="right") - 1]
            t = grid
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "dash": dash},
                "name": name,
                "x": t.tolist(),
                "y": n.tolist(),
            }
        )
    layout = {
        "xaxis": {"title": {"text": "time from the first CTA's start (µs)"}},
        "yaxis": {"title": {"text": "CTAs running"}, "rangemode": "tozero"},
    }
    return {"data": data, "layout": layout}


def limiter_bars(r: SimResult) -> dict[str, Any]:
    """Stacked horizontal bars: the share of each kernel's time (and the run's) by limiter."""
    rows = [k.name for k in r.kernels] + ["total"]
    shares = [{lim: v / k.time_s for lim, v in k.breakdown.items()} for k in r.kernels] + [
        r.limiter
    ]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": lim,
            "y": rows,
            "x": [_f(s[lim]) for s in shares],
        }
        for lim in LIMITERS
    ]
    layout = {"barmode": "stack", "xaxis": {"title": {"text": "share of time"}, "range": [0, 1]}}
    return {"data": data, "layout": layout}


def roofline(r: SimResult) -> dict[str, Any]:
    """Log-log roofline of the GPU (datasheet peaks) with the run as one point.

    x: FLOPs per DRAM byte the engine predicts; y: executed tensor TFLOP/s.
    """
    fl = r.floors
    dram = r.dram_read_bytes + r.dram_write_bytes
    x = r.flops / dram if dram else None
    ridge = fl.ridge
    xs = [ridge / 64, ridge, ridge * 64]
    ys = [min(fl.peak_flops, v * fl.peak_bandwidth) / 1e12 for v in xs]
    data = [
        {"type": "scatter", "mode": "lines", "name": f"{r.gpu.name} roof", "x": xs, "y": ys},
        {
            "type": "scatter",
            "mode": "markers",
            "name": r.algo,
            "x": [_f(x) if x is not None else None],
            "y": [_f(r.tflops_executed)],
        },
    ]
    layout = {
        "xaxis": {"type": "log", "title": {"text": "FLOPs per DRAM byte"}},
        "yaxis": {"type": "log", "title": {"text": "TFLOP/s"}},
    }
    return {"data": data, "layout": layout}


def measured_schedule(
    rec: dict[str, Any] | None, result: SimResult, max_ctas: int
) -> dict[str, Any] | None:
    """A measured schedule (each CTA's start and end in µs and its SM, from
    flashscope.kernels.timeline) beside the engine's for the same launch, or None: the CTAs
    running over time on both, the CTAs resident per SM on average, the measured Gantt."""
    if rec is None or len(result.kernels) != 1:
        return None
    k, sms = result.kernels[0], result.gpu.sms
    start, end = (np.asarray(rec[f], dtype=float) for f in ("start_us", "end_us"))
    sim_start, sim_end = k.start * 1e6, k.end * 1e6
    return {
        **{f: rec.get(f) for f in ("device", "date", "file", "median_us", "span_us")},
        "ctas": int(start.size),
        "simulated_span_us": float(sim_end.max() - sim_start.min()),
        "resident_per_sm": {
            "measured": resident_per_sm(start, end, sms),
            "simulated": resident_per_sm(sim_start, sim_end, sms),
        },
        "gantt": measured_gantt(k.name, start, end, rec["sm"], sms, max_ctas),
        "running": running_comparison((start, end), (sim_start, sim_end)),
    }
