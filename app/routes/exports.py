"""Whole-trace exports of the tile stepper: its op table as JSON, and as a Chrome trace.

GET /api/trace/ops     metadata and every step's counters as columns (no numeric state: that
                       is GET /api/trace, one step at a time)
GET /api/trace/chrome  the same steps in the Trace Event Format (chrome://tracing, Perfetto)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from flashscope.app.deps import SettingsDep, TracesDep
from flashscope.app.figures.chrome_trace import from_tile_trace
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.trace import TraceParams, check_trace_params
from flashscope.simulator.core.trace import COUNTERS, PHASES

router = APIRouter(tags=["trace"])


@router.get("/api/trace/ops")
async def trace_ops(
    params: Annotated[TraceParams, Query()], settings: SettingsDep, traces: TracesDep
) -> dict[str, Any]:
    """Every step of a trace without its state: phase, CTA, blocks and counters, as columns."""
    if errs := check_trace_params(params, settings):
        raise refuse(errs)
    trace = await traces.get(params)
    c = trace.ops.columns
    columns: dict[str, Any] = {
        "phase": [PHASES[int(x)] for x in c["phase"]],
        **{k: c[k].tolist() for k in ("cta", "q_block", "kv_block", "masked", "line")},
        **{k: c[k].tolist() for k in COUNTERS},
    }
    return {"meta": trace.describe(), "columns": columns, "note": "q_block/kv_block −1: none"}


@router.get("/api/trace/chrome")
async def trace_chrome(
    params: Annotated[TraceParams, Query()], settings: SettingsDep, traces: TracesDep
) -> dict[str, Any]:
    """The trace in the Trace Event Format: one "X" event per step, one track per CTA."""
    if errs := check_trace_params(params, settings):
        raise refuse(errs)
    trace = await traces.get(params)
    return from_tile_trace(trace)
