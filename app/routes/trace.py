"""The tile trace: GET /api/trace (JSON twin of /tiles) and the /ws/trace stepping stream.

WebSocket protocol (JSON text messages):
    client → {"type": "open", "params": {algo, n, nk, d, bm, bn, seed, causal, dtype, group,
                                          splits}}
    server → {"type": "meta", "meta": {...}}  or  {"type": "error", "errors": [...]}
    client → {"type": "step", "step": k}
    server → {"type": "event", "event": {...}}  or  {"type": "error", "errors": [...]}
The server sends one event per request: the client never recomputes the algorithm.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from flashscope.app.deps import SettingsDep, TracesDep
from flashscope.app.middleware.errors import describe, limit_error, refuse, value_error
from flashscope.app.schemas.trace import (
    StrictTraceParams,
    TraceEventModel,
    TraceParams,
    TraceResponse,
    check_step,
    check_trace_params,
)

router = APIRouter(tags=["trace"])


@router.get("/api/trace", response_model=TraceResponse)
async def get_trace(
    params: Annotated[TraceParams, Query()],
    settings: SettingsDep,
    traces: TracesDep,
    start: Annotated[int, Query(ge=0, description="First event to return.")] = 0,
    count: Annotated[int, Query(ge=0, description="Events to return.")] = 1,
) -> Any:
    """Metadata of a trace and `count` of its events from `start`."""
    errs = check_trace_params(params, settings)
    if count > settings.max_events_per_request:
        errs.append(
            {
                "type": "limit",
                "loc": ["query", "count"],
                "input": count,
                "msg": f"count must be ≤ {settings.max_events_per_request}, got {count}",
                "ctx": {"limit": settings.max_events_per_request},
            }
        )
    if errs:
        raise refuse(errs)
    try:
        trace = await traces.get(params)
    except ValueError as exc:  # a state budget or shape the checks above did not foresee
        raise refuse([value_error("params", str(exc), None)]) from None
    if count and start >= len(trace):
        raise refuse(check_step(start, len(trace)))
    events = [trace.event(i) for i in range(start, min(start + count, len(trace)))]
    # Events of wide states run to ~150 kB each: bound the response in bytes, not just events.
    room = settings.max_trace_response_bytes - len(json.dumps(trace.describe()))
    for fits, event in enumerate(events):
        room -= len(TraceEventModel.model_validate(event).model_dump_json()) + 1
        if room < 0:
            raise refuse(
                [
                    limit_error(
                        "count",
                        f"count must be ≤ {max(1, fits)} from step {start} of this trace "
                        f"(responses are limited to {settings.max_trace_response_bytes:,} "
                        f"bytes), got {count}",
                        count,
                        max(1, fits),
                    )
                ]
            )
    return {"meta": trace.describe(), "start": start, "events": events}


@router.websocket("/ws/trace")
async def trace_stream(ws: WebSocket, settings: SettingsDep, traces: TracesDep) -> None:
    await ws.accept()
    trace = None
    try:
        while True:
            raw = await ws.receive_text()
            if len(raw.encode()) > settings.ws_max_message_bytes:
                await ws.close(
                    code=1009, reason=f"message over {settings.ws_max_message_bytes} bytes"
                )
                return
            try:
                msg = json.loads(raw)
                kind = msg.get("type") if isinstance(msg, dict) else None
            except json.JSONDecodeError:
                kind, msg = None, None
            if kind == "open":
                try:
                    params = StrictTraceParams.model_validate(msg.get("params") or {})
                except ValidationError as exc:
                    await _send_errors(
                        ws,
                        [dict(e, loc=["params", *e["loc"]]) for e in exc.errors(include_url=False)],
                    )
                    continue
                errs = check_trace_params(params, settings, where="params")
                wait = ws.app.state.rate_limiter.take_for(ws.scope, "compute")
                if wait > 0:
                    errs.append(
                        limit_error(
                            "type",
                            f"too many traces opened from this client; retry after {wait:.1f} s",
                            kind,
                            settings.rate_compute_per_s,
                            "message",
                        )
                    )
                if errs:
                    await _send_errors(ws, errs)
                    continue
                try:
                    trace = await traces.get(params)
                except ValueError as exc:
                    await _send_errors(ws, [value_error("params", str(exc), None, "params")])
                    continue
                await ws.send_json({"type": "meta", "meta": trace.describe()})
            elif kind == "step":
                step = msg.get("step")
                if trace is None:
                    await _send_errors(
                        ws, [value_error("type", "send an open message first", kind, "message")]
                    )
                elif isinstance(step, bool) or not isinstance(step, int):
                    await _send_errors(
                        ws, [value_error("step", "step must be an integer", step, "message")]
                    )
                elif errs := check_step(step, len(trace), "message"):
                    await _send_errors(ws, errs)
                else:
                    event = TraceEventModel.model_validate(trace.event(step))
                    # pydantic's own JSON encoder: several times faster than json.dumps of the
                    # dumped dict on a 64×64 state (benchmarks/step_latency.py).
                    await ws.send_text(f'{{"type":"event","event":{event.model_dump_json()}}}')
            else:
                await _send_errors(
                    ws,
                    [
                        value_error(
                            "type",
                            'message must be JSON with "type": "open" or "step"',
                            raw[:80],
                            "message",
                        )
                    ],
                )
    except WebSocketDisconnect:
        return


async def _send_errors(ws: WebSocket, errors: list[dict[str, Any]]) -> None:
    await ws.send_json({"type": "error", "errors": describe(errors)})
