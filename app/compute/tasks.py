"""The tasks a compute worker runs (app/compute/pool.py), by name; each returns picklable,
JSON-ready values. `state` is the worker's own: its trace cache lives there.

    trace.meta    (params)                      → the trace's metadata
    trace.step    (params, step)                → one event as JSON text (/ws/trace)
    trace.window  (params, start, count, limit) → events as JSON texts, refused past `limit`
                                                  bytes before they are all built
    trace.ops     (params)                      → GET /api/trace/ops's body
    trace.chrome  (params)                      → GET /api/trace/chrome's body
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from flashscope.app.figures.chrome_trace import from_tile_trace
from flashscope.app.schemas.trace import TraceEventModel, TraceParams
from flashscope.simulator.core.trace import COUNTERS, PHASES, Trace
from flashscope.simulator.teach.tracing import build_trace


class ResponseTooLarge(ValueError):
    """A window of events would exceed the response limit: `fits` events would fit."""

    def __init__(self, fits: int) -> None:
        super().__init__(f"fits={fits}")
        self.fits = fits


def _trace(params: TraceParams, options: dict[str, Any], state: dict[str, Any]) -> Trace:
    """The trace of `params`, from the worker's cache (LRU of `options['cache']` traces)."""
    cache: OrderedDict[tuple[Any, ...], Trace] = state.setdefault("traces", OrderedDict())
    key = params.cache_key()
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    problem, tiles, kw = params.problem()
    trace = build_trace(
        params.algo,
        problem,
        tiles,
        params.seed,
        o_col_limit=options["o_col_limit"],
        budget_bytes=options["state_bytes"],
        **kw,
    )
    cache[key] = trace
    while len(cache) > options["cache"]:
        cache.popitem(last=False)
    return trace


def _event_json(trace: Trace, step: int) -> str:
    return TraceEventModel.model_validate(trace.event(step)).model_dump_json()


def _window(trace: Trace, start: int, count: int, limit: int) -> list[str]:
    """Events start … start + count − 1 as JSON, refused before building them all when the first
    one shows the window cannot fit in `limit` bytes (events of one trace are alike in size)."""
    stop = min(start + count, len(trace))
    out: list[str] = []
    room = limit
    for step in range(start, stop):
        text = _event_json(trace, step)
        room -= len(text) + 1
        if step == start and (len(text) + 1) * (stop - start) > limit * 2:
            raise ResponseTooLarge(max(1, limit // (len(text) + 1)))
        if room < 0:
            raise ResponseTooLarge(max(1, len(out)))
        out.append(text)
    return out


def run(name: str, payload: Any, state: dict[str, Any]) -> Any:
    """Run task `name` (see the module docstring)."""
    params, options, *args = payload
    trace = _trace(params, options, state)
    if name == "trace.meta":
        return trace.describe()
    if name == "trace.step":
        return _event_json(trace, args[0])
    if name == "trace.window":
        start, count, limit = args
        return trace.describe(), _window(trace, start, count, limit)
    if name == "trace.ops":
        c = trace.ops.columns
        return {
            "meta": trace.describe(),
            "columns": {
                "phase": [PHASES[int(x)] for x in c["phase"]],
                **{k: c[k].tolist() for k in ("cta", "q_block", "kv_block", "masked", "line")},
                **{k: c[k].tolist() for k in COUNTERS},
            },
            "note": "q_block/kv_block −1: none",
        }
    if name == "trace.chrome":
        return from_tile_trace(trace)
    raise ValueError(f"no task {name!r}")
