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

from fastapi import (
    APIRouter,
    Query,
    Request,
    Response,
    WebSocket,
    WebSocketDisconnect,
)
from pydantic import ValidationError

from flashscope.app.compute.http import disconnected, pool_errors
from flashscope.app.compute.pool import Busy, Cancelled, TaskError, TooSlow
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TracesDep
from flashscope.app.middleware import wsjson
from flashscope.app.middleware.errors import describe, limit_error, refuse, value_error
from flashscope.app.middleware.identity import shares
from flashscope.app.middleware.origin import same_origin
from flashscope.app.middleware.ratelimit import Bucket, Rate
from flashscope.app.middleware.wsinbox import Inbox
from flashscope.app.schemas.trace import (
    StrictTraceParams,
    TraceParams,
    TraceResponse,
    check_step,
    check_trace_params,
)

router = APIRouter(tags=["trace"])


def cost_errors(
    params: TraceParams, settings: Settings, where: str = "query"
) -> list[dict[str, Any]]:
    """The trace's numerics, estimated before any work (query rows × keys × head_dim, every
    query head of a decode group), against `trace_max_macs`."""
    rows = params.n * (params.group if params.algo == "decode" else 1)
    keys = params.nk if params.nk is not None else params.n
    macs = rows * keys * params.d * (3 if params.algo == "fa2-bwd" else 1)
    if macs <= settings.trace_max_macs:
        return []
    field = "nk" if params.algo == "decode" else "n"
    value = keys if field == "nk" else params.n
    return [
        limit_error(
            field,
            f"this trace would take {macs:.3g} multiply-adds (query rows × keys × head_dim"
            f"{', ×3 for the backward' if params.algo == 'fa2-bwd' else ''}); at most "
            f"{settings.trace_max_macs:.3g}: use a shorter {field}, a smaller head_dim"
            f"{' or group' if params.algo == 'decode' else ''}",
            value,
            settings.trace_max_macs,
            where,
        )
    ]


@router.get("/api/trace", response_model=TraceResponse)
async def get_trace(
    params: Annotated[TraceParams, Query()],
    request: Request,
    settings: SettingsDep,
    traces: TracesDep,
    start: Annotated[int, Query(ge=0, description="First event to return.")] = 0,
    count: Annotated[int, Query(ge=0, description="Events to return.")] = 1,
) -> Any:
    """Metadata of a trace and `count` of its events from `start`."""
    errs = check_trace_params(params, settings) or cost_errors(params, settings)
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
    n_events = closed_form_events(params) if not errs and count else None
    if n_events is not None and start >= n_events:
        errs += check_step(start, n_events)
    if errs:
        raise refuse(errs)
    limit = settings.max_trace_response_bytes
    window = count if n_events is None else min(count, n_events - start)
    if window and (fits := traces.too_large(params, window, limit)) is not None:
        raise refuse([_window_too_large(start, count, fits, limit)])  # known: no worker needed
    try:
        meta, events = await traces.window(
            params,
            start,
            count,
            settings.max_trace_response_bytes,
            gone=disconnected(request),
            who=shares(request.scope),
        )
    except TaskError as exc:
        if exc.kind == "ResponseTooLarge":
            fits = int(str(exc).partition("=")[2] or 1)
            traces.learn(params, limit // (fits + 1))  # a lower bound of one event's size
            raise refuse([_window_too_large(start, count, fits, limit)]) from None
        raise pool_errors(exc, settings) from None
    except (Busy, TooSlow, Cancelled) as exc:
        raise pool_errors(exc, settings) from None
    if count and start >= meta["n_events"]:
        raise refuse(check_step(start, meta["n_events"]))
    if events:
        traces.learn(params, sum(map(len, events)) // len(events))
    body = ",".join(events)
    return Response(
        f'{{"meta":{json.dumps(meta)},"start":{start},"events":[{body}]}}',
        media_type="application/json",
    )


def _window_too_large(start: int, count: int, fits: int, limit: int) -> dict[str, Any]:
    return limit_error(
        "count",
        f"count must be ≤ {fits} from step {start} of this trace (responses are limited to "
        f"{limit:,} bytes), got {count}",
        count,
        fits,
    )


def closed_form_events(params: TraceParams) -> int | None:
    """The trace's number of events from its tile program's closed form (no numerics)."""
    from flashscope.simulator.teach.algorithms import get

    problem, tiles, kw = params.problem()
    try:
        return int(get(params.algo).n_events(problem, tiles, **kw))
    except ValueError:
        return None


@router.websocket("/ws/trace")
async def trace_stream(ws: WebSocket, settings: SettingsDep, traces: TracesDep) -> None:
    if not same_origin(ws.scope, settings):
        await ws.close(code=4403, reason="this page's origin may not open trace streams here")
        return
    await ws.accept()
    params: TraceParams | None = None
    n_events = 0
    steps = Bucket(Rate(settings.ws_steps_per_s, settings.ws_steps_burst))
    inbox = Inbox(ws)  # read meanwhile: a client that leaves stops the work it asked for
    try:
        while True:
            raw = await inbox.get()
            if len(raw.encode()) > settings.ws_max_message_bytes:
                await ws.close(
                    code=1009, reason=f"message over {settings.ws_max_message_bytes} bytes"
                )
                return
            try:
                msg = wsjson.loads(raw)
                kind = msg.get("type") if isinstance(msg, dict) else None
            except wsjson.BadMessage as exc:
                await _send_errors(ws, [value_error("type", str(exc), raw[:80], "message")])
                continue
            if kind == "open":
                try:
                    wanted = StrictTraceParams.model_validate(msg.get("params") or {})
                except ValidationError as exc:
                    await _send_errors(
                        ws,
                        [dict(e, loc=["params", *e["loc"]]) for e in exc.errors(include_url=False)],
                    )
                    continue
                errs = check_trace_params(wanted, settings, where="params") or cost_errors(
                    wanted, settings, where="params"
                )
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
                    meta = await traces.meta(wanted, gone=inbox.gone, who=shares(ws.scope))
                except Cancelled:
                    return  # the client has gone: its work was stopped, nobody to answer
                except (TaskError, Busy, TooSlow) as exc:
                    await _send_errors(ws, [value_error("params", str(exc), None, "params")])
                    continue
                params, n_events = wanted, int(meta["n_events"])
                await ws.send_json({"type": "meta", "meta": meta})
            elif kind == "step":
                step = msg.get("step")
                wait = steps.take()
                if params is None:
                    await _send_errors(
                        ws, [value_error("type", "send an open message first", kind, "message")]
                    )
                elif wait > 0:
                    await _send_errors(
                        ws,
                        [
                            limit_error(
                                "type",
                                f"too many steps: at most {settings.ws_steps_per_s:g} per "
                                f"second; retry after {wait:.2f} s",
                                kind,
                                settings.ws_steps_per_s,
                                "message",
                            )
                        ],
                    )
                elif isinstance(step, bool) or not isinstance(step, int):
                    await _send_errors(
                        ws, [value_error("step", "step must be an integer", step, "message")]
                    )
                elif errs := check_step(step, n_events, "message"):
                    await _send_errors(ws, errs)
                else:
                    try:
                        event = await traces.step(
                            params, step, gone=inbox.gone, who=shares(ws.scope)
                        )
                    except Cancelled:
                        return  # the client has gone
                    except (TaskError, Busy, TooSlow) as exc:
                        await _send_errors(ws, [value_error("step", str(exc), step, "message")])
                        continue
                    await ws.send_text(f'{{"type":"event","event":{event}}}')
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
    finally:
        inbox.close()


async def _send_errors(ws: WebSocket, errors: list[dict[str, Any]]) -> None:
    await ws.send_json({"type": "error", "errors": describe(errors)})
