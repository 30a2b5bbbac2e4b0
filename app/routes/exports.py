"""Whole-trace exports of the tile stepper: its op table as JSON, and as a Chrome trace.

GET /api/trace/ops     metadata and every step's counters as columns (no numeric state: that
                       is GET /api/trace, one step at a time)
GET /api/trace/chrome  the same steps in the Trace Event Format (chrome://tracing, Perfetto)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from flashscope.app.compute.http import disconnected, pool_errors
from flashscope.app.compute.pool import Busy, Cancelled, TaskError, TooSlow
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TracesDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.middleware.identity import shares
from flashscope.app.routes.trace import cost_errors
from flashscope.app.schemas.trace import TraceParams, check_trace_params
from flashscope.app.traces import TraceService

router = APIRouter(tags=["trace"])


async def _export(
    task: str, params: TraceParams, request: Request, settings: Settings, traces: TraceService
) -> dict[str, Any]:
    if errs := check_trace_params(params, settings) or cost_errors(params, settings):
        raise refuse(errs)
    try:
        return await traces.export(
            task, params, gone=disconnected(request), who=shares(request.scope)
        )
    except (TaskError, Busy, TooSlow, Cancelled) as exc:
        raise pool_errors(exc, settings) from None


@router.get("/api/trace/ops")
async def trace_ops(
    params: Annotated[TraceParams, Query()],
    request: Request,
    settings: SettingsDep,
    traces: TracesDep,
) -> dict[str, Any]:
    """Every step of a trace without its state: phase, CTA, blocks and counters, as columns."""
    return await _export("trace.ops", params, request, settings, traces)


@router.get("/api/trace/chrome")
async def trace_chrome(
    params: Annotated[TraceParams, Query()],
    request: Request,
    settings: SettingsDep,
    traces: TracesDep,
) -> dict[str, Any]:
    """The trace in the Trace Event Format: one "X" event per step, one track per CTA."""
    return await _export("trace.chrome", params, request, settings, traces)
