"""Chrome / Perfetto traces: one complete event per step, one track per CTA (or SM when timed)."""

from __future__ import annotations

import json

import numpy as np

from flashscope.app.figures.chrome_trace import from_tile_trace, from_walks
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.trace import COUNTERS, PHASES
from flashscope.simulator.teach.memory_wall import flash_walk, naive_walk
from flashscope.simulator.teach.tracing import build_trace


def _spans(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_tile_trace_has_one_event_per_step_on_cta_tracks():
    trace = build_trace(
        "fa2", AttentionProblem(seq_q=97, seq_k=200, head_dim=16), TileConfig(32, 64)
    )
    doc = json.loads(json.dumps(from_tile_trace(trace)))  # JSON-clean
    spans = _spans(doc)
    assert len(spans) == len(trace)
    c = trace.ops.columns
    assert [s["ts"] for s in spans] == list(range(len(trace)))
    assert all(s["dur"] == 1 for s in spans)
    assert [s["tid"] for s in spans] == c["cta"].tolist()
    assert [s["name"] for s in spans] == [PHASES[p] for p in c["phase"]]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {i: f"CTA {i}" for i in range(4)}
    for counter in COUNTERS:
        assert sum(s["args"].get(counter, 0) for s in spans) == int(c[counter].sum())


def test_timed_trace_uses_sm_tracks_and_times():
    trace = build_trace("fa2", AttentionProblem(seq_q=64, head_dim=8), TileConfig(16, 32))
    n = len(trace)
    cols = trace.ops.columns
    cols["sm"] = cols["cta"] % 2
    cols["t_start"] = np.arange(n) * 100.0
    cols["t_end"] = np.arange(n) * 100.0 + 50.0
    try:
        spans = _spans(from_tile_trace(trace, clock_hz=1e9))
    finally:
        for k in ("sm", "t_start", "t_end"):
            del cols[k]
    assert {s["tid"] for s in spans} == {0, 1}
    assert spans[3]["ts"] == 0.3 and spans[3]["dur"] == 0.05  # 100 cycles at 1 GHz = 0.1 µs
    assert spans[3]["args"]["cta"] == int(cols["cta"][3])


def test_memory_wall_walks_side_by_side():
    p, t = AttentionProblem(seq_q=200, head_dim=16), TileConfig(64, 128)
    naive, flash = naive_walk(p, t), flash_walk(p, t)
    doc = from_walks([naive, flash])
    spans = _spans(doc)
    assert len(spans) == len(naive) + len(flash)
    for pid, w in enumerate((naive, flash)):
        mine = [s for s in spans if s["pid"] == pid]
        assert sum(s["args"]["hbm_read"] for s in mine) == int(w.hbm_read.sum())
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert procs == {0: "naive", 1: "flash"}
