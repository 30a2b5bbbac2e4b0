"""Traces in the Chrome Trace Event Format, for chrome://tracing and ui.perfetto.dev.

One complete ("X") event per step of a tile program: on one track per CTA (untimed traces) or
per SM (timed traces, which carry `sm`). Untimed traces are laid out by step index, one step =
one microsecond of the timeline; timed traces use `t_start` / `t_end` (cycles), converted to
microseconds when the clock is known. Process and thread names come as metadata ("M") events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashscope.simulator.core.trace import COUNTERS, PHASES, Trace
from flashscope.simulator.teach.memory_wall import KINDS, Walk
from flashscope.simulator.timing.results import SimResult


@dataclass(frozen=True)
class Span:
    """One step on one track."""

    name: str
    pid: int
    tid: int
    ts: float  # microseconds
    dur: float  # microseconds
    cat: str = "step"
    args: dict[str, Any] = field(default_factory=dict)


def trace_events(
    spans: Iterable[Span],
    processes: dict[int, str],
    threads: dict[tuple[int, int], str],
    other: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object Perfetto and chrome://tracing open: metadata events, then the spans."""
    events: list[dict[str, Any]] = []
    for pid, name in processes.items():
        events.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
    for (pid, tid), name in threads.items():
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    for s in spans:
        events.append(
            {
                "name": s.name,
                "cat": s.cat,
                "ph": "X",
                "ts": s.ts,
                "dur": s.dur,
                "pid": s.pid,
                "tid": s.tid,
                "args": s.args,
            }
        )
    return {"traceEvents": events, "otherData": other or {}}


def from_tile_trace(trace: Trace, clock_hz: float | None = None) -> dict[str, Any]:
    """A tile trace as Trace Event Format: tracks per CTA, or per SM when the trace is timed."""
    c = trace.ops.columns
    n = len(trace)
    timed = "t_start" in c and "t_end" in c
    by_sm = timed and "sm" in c
    track = c["sm"] if by_sm else c["cta"]
    if timed:
        to_us = 1e6 / clock_hz if clock_hz else 1.0
        ts = np.asarray(c["t_start"], np.float64) * to_us
        dur = (np.asarray(c["t_end"], np.float64) - np.asarray(c["t_start"], np.float64)) * to_us
        unit = "microseconds" if clock_hz else "cycles (shown as microseconds)"
    else:
        ts = np.arange(n, dtype=np.float64)
        dur = np.ones(n)
        unit = "steps (one step = one microsecond)"
    label = "SM" if by_sm else "CTA"
    title = trace.meta.get("title", trace.meta.get("algo", "trace"))

    def spans() -> Iterable[Span]:
        for i in range(n):
            args: dict[str, Any] = {"step": i}
            for key in ("q_block", "kv_block"):
                if int(c[key][i]) >= 0:
                    args[key] = int(c[key][i])
            if by_sm:
                args["cta"] = int(c["cta"][i])
            args.update({k: int(c[k][i]) for k in COUNTERS if int(c[k][i])})
            yield Span(
                PHASES[int(c["phase"][i])],
                0,
                int(track[i]),
                float(ts[i]),
                float(dur[i]),
                cat="masked" if bool(c["masked"][i]) else "tile",
                args=args,
            )

    tracks = sorted({int(x) for x in track})
    return trace_events(
        spans(),
        {0: str(title)},
        {(0, t): f"{label} {t}" for t in tracks},
        {"source": "flashscope", "meta": _plain(trace.describe()), "time_unit": unit},
    )


def from_walks(walks: Iterable[Walk], other: dict[str, Any] | None = None) -> dict[str, Any]:
    """Memory-wall walks side by side: one process per algorithm, one track per kernel CTA."""
    spans: list[Span] = []
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    tids: dict[tuple[int, str], int] = {}  # tracks numbered in order of first use
    for pid, w in enumerate(walks):
        processes[pid] = w.name
        read, write = w.hbm_read, w.hbm_write
        for k in range(len(w)):
            kernel, qb = int(w.kernel[k]), int(w.q_block[k])
            name = f"kernel {kernel} · CTA {qb}" if w.name == "naive" else f"CTA {qb}"
            tid = tids.setdefault((pid, name), len(tids))
            threads[(pid, tid)] = name
            args = {"step": k, "q_block": qb, "hbm_read": int(read[k]), "hbm_write": int(write[k])}
            if int(w.kv_block[k]) >= 0:
                args["kv_block"] = int(w.kv_block[k])
            spans.append(Span(KINDS[int(w.kind[k])], pid, tid, float(k), 1.0, "hbm", args))
    return trace_events(
        spans,
        processes,
        threads,
        {"time_unit": "steps (one step = one microsecond)", **(other or {})},
    )


def from_timeline(r: SimResult, sms_shown: int | None = None) -> dict[str, Any]:
    """The timing engine's schedule: one track per SM, one "X" event per CTA (microseconds of
    simulated time), each kernel launch a span on a "launches" track above the SMs. Only SMs
    below `sms_shown` (default all) get their CTAs."""
    n_sms = r.gpu.sms if sms_shown is None else sms_shown
    spans: list[Span] = []
    for k in r.kernels:
        slots = r.gpu.sms * k.ctas_per_sm
        spans.append(
            Span(k.name, 0, 0, k.offset_s * 1e6, k.time_s * 1e6, "launch", {"ctas": k.n_ctas})
        )
        for c in np.flatnonzero(k.sm < n_sms).tolist():
            spans.append(
                Span(
                    k.name,
                    0,
                    int(k.sm[c]) + 1,
                    float(k.start[c] * 1e6),
                    float((k.end[c] - k.start[c]) * 1e6),
                    "cta",
                    {"cta": c, "wave": c // slots + 1, "block": c % int(k.grid[0])},
                )
            )
    used = sorted({s.tid for s in spans if s.tid > 0})
    threads = {(0, 0): "launches", **{(0, t): f"SM {t - 1}" for t in used}}
    other = {
        "source": "flashscope timing engine",
        "gpu": r.gpu.name,
        "algo": r.algo,
        "time_unit": "microseconds (simulated)",
        "sms_shown": n_sms,
    }
    return trace_events(spans, {0: f"{r.algo} on {r.gpu.name}"}, threads, other)


def _plain(value: Any) -> Any:
    """Metadata made JSON-safe (non-finite floats become strings)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value
