"""The GPU schedule as figures: CTAs on SMs coloured by wave, a time cursor, causal imbalance.

Pure functions from an engine result (`results.SimResult`) to JSON-ready dicts for the
/schedule view; Plotly figures are {"data", "layout"} dicts, times in microseconds.

Waves: a launch of n CTAs on a GPU with `slots` = SMs × CTAs per SM runs in ⌈n / slots⌉ waves;
CTA k (launch order) belongs to wave ⌊k / slots⌋. With uneven CTAs (causal) the waves blur:
a slot freed early takes the next CTA at once, which is what the Gantt chart shows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flashscope.simulator.timing.results import KernelResult, SimResult

# What the first grid index of each kernel counts (its CTAs differ along it; heads repeat it).
BLOCK_AXIS = {
    "fa2": "query block",
    "fa1": "head",
    "naive_qk": "query block",
    "naive_softmax": "query block",
    "naive_pv": "query block",
    "bwd_preprocess": "query block",
    "bwd_main": "key block",
    "bwd_postprocess": "query block",
    "decode_split": "split",
}
# The kernels as the lessons name them, for axis titles (the engine's names are code).
KERNEL_TITLE = {
    "fa2": "FA-2 forward",
    "fa1": "FA-1 forward",
    "naive_qk": "naive S = QKᵀ",
    "naive_softmax": "naive softmax",
    "naive_pv": "naive O = PV",
    "bwd_preprocess": "backward, D = rowsum(dO∘O)",
    "bwd_main": "FA-2 backward",
    "bwd_dq": "backward dQ",
    "bwd_dkdv": "backward dK, dV",
    "bwd_postprocess": "backward, dQ to its dtype",
    "decode_split": "decode, one split (a head's last also merges the splits)",
}
WAVE_COLORS = ("#1d4ed8", "#f59e0b", "#059669", "#dc2626", "#7c3aed", "#0891b2")


def slots(k: KernelResult, sms: int) -> int:
    return sms * k.ctas_per_sm


def waves(k: KernelResult, sms: int) -> np.ndarray:
    """(n,) the wave of each CTA: its launch index over the GPU's slots."""
    return np.arange(k.n_ctas) // slots(k, sms)


def shown_sms(r: SimResult, max_ctas: int) -> int:
    """How many SMs (from SM 0) to draw so that at most `max_ctas` CTAs are drawn (at least 1)."""
    if sum(k.n_ctas for k in r.kernels) <= max_ctas:
        return r.gpu.sms
    per_sm = np.bincount(np.concatenate([k.sm for k in r.kernels]), minlength=r.gpu.sms)
    return max(1, int(np.searchsorted(np.cumsum(per_sm), max_ctas, side="right")))


def gantt_by_wave(r: SimResult, max_ctas: int = 20000) -> dict[str, Any]:
    """One horizontal bar per CTA (y = SM, µs), coloured by wave; one trace per kernel and wave
    colour so the legend reads "fa2 · wave 1", … (at most six colours, then they repeat)."""
    n_shown = shown_sms(r, max_ctas)
    data = []
    for k in r.kernels:
        wave = waves(k, r.gpu.sms)
        block = np.arange(k.n_ctas) % k.grid[0]
        keep = k.sm < n_shown
        last = int(wave.max(initial=0))
        n_colours = len(WAVE_COLORS)
        for colour in range(min(n_colours, last + 1)):
            sel = keep & (wave % n_colours == colour)
            if not sel.any():
                continue
            idx = np.flatnonzero(sel)
            which = ", ".join(str(w + 1) for w in range(colour, last + 1, n_colours)[:2])
            more = ", …" if last + 1 - colour > 2 * n_colours else ""
            data.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": f"{k.name} · wave{'s' if ',' in which else ''} {which}{more}",
                    "legendgroup": k.name,
                    "y": k.sm[idx].tolist(),
                    "base": np.round(k.start[idx] * 1e6, 4).tolist(),
                    "x": np.round((k.end - k.start)[idx] * 1e6, 4).tolist(),
                    "marker": {"color": WAVE_COLORS[colour], "line": {"width": 0}},
                    "customdata": np.stack([idx, wave[idx] + 1, block[idx]], axis=1).tolist(),
                    "hovertemplate": (
                        f"{k.name} CTA %{{customdata[0]}} · wave %{{customdata[1]}} · "
                        f"{BLOCK_AXIS.get(k.name, 'block')} %{{customdata[2]}}<br>"
                        "SM %{y}: %{base:.2f} → +%{x:.2f} µs<extra></extra>"
                    ),
                }
            )
    layout = {
        "barmode": "overlay",
        "bargap": 0.05,
        "xaxis": {"title": {"text": "time (µs)"}},
        "yaxis": {"title": {"text": "SM"}, "autorange": "reversed"},
        "meta": {
            "sms_shown": n_shown,
            "sms": r.gpu.sms,
            "ctas": sum(k.n_ctas for k in r.kernels),
        },
    }
    return {"data": data, "layout": layout}


def cursor(r: SimResult, steps: int = 100) -> dict[str, Any]:
    """The run seen at `steps` + 1 evenly spaced instants from 0 to its end: CTAs waiting,
    running and done, SMs busy, and the kernel and wave running then (the longest kernel's
    wave when several overlap, which launches never do here; none at an instant when no CTA
    runs, between waves as between launches)."""
    total = r.time_s
    times = np.linspace(0.0, total, steps + 1)  # (T,)
    start = np.concatenate([k.start for k in r.kernels])
    end = np.concatenate([k.end for k in r.kernels])
    sm = np.concatenate([k.sm for k in r.kernels])
    n = len(start)
    started = np.searchsorted(np.sort(start), times, side="right")
    done = np.searchsorted(np.sort(end), times, side="right")
    busy = np.empty(len(times), dtype=np.int64)
    kernel: list[str | None] = []
    wave: list[int | None] = []
    for i, t in enumerate(times):
        running = (start <= t) & (end > t)
        busy[i] = len(np.unique(sm[running]))
        now = next((k for k in r.kernels if ((k.start <= t) & (k.end > t)).any()), None)
        kernel.append(None if now is None else now.name)
        if now is None:
            wave.append(None)
        else:
            live = (now.start <= t) & (now.end > t)
            wave.append(int(waves(now, r.gpu.sms)[live].min()) + 1)
    return {
        "times_us": np.round(times * 1e6, 4).tolist(),
        "waiting": (n - started).tolist(),
        "running": (started - done).tolist(),
        "done": done.tolist(),
        "sms_busy": busy.tolist(),
        "kernel": kernel,
        "wave": wave,
        "ctas": n,
        "sms": r.gpu.sms,
    }


def utilization(c: dict[str, Any]) -> dict[str, Any]:
    """Share of SMs busy over time (from `cursor`), a step line under the Gantt chart."""
    share = [b / c["sms"] for b in c["sms_busy"]]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "color": "#1d4ed8"},
                "fill": "tozeroy",
                "name": "SMs busy",
                "x": c["times_us"],
                "y": share,
                "hovertemplate": "%{x:.1f} µs: %{y:.0%} of SMs busy<extra></extra>",
            }
        ],
        "layout": {
            "xaxis": {"title": {"text": "time (µs)"}},
            "yaxis": {"title": {"text": "SMs busy"}, "range": [0, 1.05], "tickformat": ".0%"},
            "showlegend": False,
        },
    }


def imbalance(r: SimResult) -> dict[str, Any]:
    """CTA time of the longest kernel by its block index (mean, min, max over heads): under a
    causal mask early query blocks see few keys and finish first."""
    k = r.main
    axis = BLOCK_AXIS.get(k.name, "block")
    block = np.arange(k.n_ctas) % k.grid[0]
    dur = (k.end - k.start) * 1e6  # (n,) µs
    n_blocks = int(k.grid[0])
    count = np.bincount(block, minlength=n_blocks)
    mean = np.bincount(block, weights=dur, minlength=n_blocks) / np.maximum(count, 1)
    lo = np.full(n_blocks, np.inf)
    hi = np.zeros(n_blocks)
    np.minimum.at(lo, block, dur)
    np.maximum.at(hi, block, dur)
    xs = list(range(n_blocks))
    fig = {
        "data": [
            {
                "type": "bar",
                "name": "mean CTA time",
                "x": xs,
                "y": np.round(mean, 4).tolist(),
                "marker": {"color": "#60a5fa"},
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": np.round(hi - mean, 4).tolist(),
                    "arrayminus": np.round(mean - lo, 4).tolist(),
                    "color": "#1f2937",
                    "thickness": 1,
                },
                "hovertemplate": f"{axis} %{{x}}: %{{y:.2f}} µs (mean)<extra></extra>",
            }
        ],
        "layout": {
            "xaxis": {"title": {"text": f"{KERNEL_TITLE.get(k.name, k.name)}: {axis}"}},
            "yaxis": {"title": {"text": "CTA time (µs)"}, "rangemode": "tozero"},
            "showlegend": False,
        },
    }
    ratio = float(mean.max() / mean.min()) if mean.min() > 0 else math.inf
    return {
        "figure": fig,
        "kernel": k.name,
        "axis": axis,
        "first_us": float(mean[0]),
        "last_us": float(mean[-1]),
        "ratio": ratio if math.isfinite(ratio) else None,
    }


def occupancy_table(r: SimResult) -> list[dict[str, Any]]:
    """Per kernel: CTAs per SM, which resource limits it, and what each resource would allow."""
    out = []
    for k in r.kernels:
        occ, fp = k.occupancy, k.occupancy.footprint
        out.append(
            {
                "kernel": k.name,
                "ctas": k.n_ctas,
                "ctas_per_sm": occ.ctas_per_sm,
                "slots": slots(k, r.gpu.sms),
                "waves": k.waves,
                "limiter": occ.limiter,
                "limits": dict(occ.limits),
                "smem_bytes": fp.smem_bytes,
                "smem_per_sm_bytes": r.gpu.smem_per_sm,
                "regs_per_thread": fp.regs_per_thread,
                "warps": fp.warps,
                "spills": fp.spills,
            }
        )
    return out
