"""Live kernel runs: POST /api/runs queues one, GET /api/runs/{id} reads it, and
GET /api/runs/{id}/events streams its progress as server-sent events until it ends.

A run queued here is cancelled when nobody follows it for `runs_unwatched_s` seconds: no
progress stream open on it, and no GET of it (app/runs/queue.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.middleware.identity import address_key, client_key
from flashscope.app.routes.health import backend_of, capability_of
from flashscope.app.runs.queue import FINAL, QueueFull, Run, RunQueue
from flashscope.app.schemas.trace import RunRequest, check_run_request

router = APIRouter(tags=["runs"])

RunId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$")]


async def _queue(request: Request) -> RunQueue:
    """The run queue, started on first use; the devices are found off the event loop."""
    service = request.app.state.runs
    await service.ready()
    queue: RunQueue = service.get()
    return queue


def request_key(body: RunRequest) -> str:
    text = json.dumps(body.model_dump(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


SETTING = {
    "queue": "runs_max_queued",
    "client": "runs_max_queued_per_client",
    "address": "runs_max_queued_per_address",
}


def queue_full(full: QueueFull, settings: Settings | None = None) -> JSONResponse:
    """HTTP 429 for a full queue (in all, for this client or this address), with the limit
    reached, its setting and when to come back (`settings`: not needed, callers pass them)."""
    return JSONResponse(
        status_code=429,
        headers={"Retry-After": str(full.retry_after)},
        content={
            "detail": [
                {
                    "type": "queue_full" if full.who == "queue" else f"queue_full_{full.who}",
                    "loc": ["body"],
                    "field": None,
                    "msg": str(full),
                    "limit": full.limit,
                    "setting": "FLASHSCOPE_" + SETTING[full.who].upper(),
                }
            ]
        },
    )


def submit(queue: RunQueue, body: RunRequest, request: Request) -> tuple[Run, bool]:
    """Queue a run for the client that asks (its identity and address); raises QueueFull. The
    run is cancelled when nobody follows it for `runs_unwatched_s`."""
    scope = request.scope
    return queue.submit(
        request_key(body),
        body.model_dump(),
        client=client_key(scope),
        address=address_key(scope),
        unwatched_s=request.app.state.settings.runs_unwatched_s,
    )


@router.post("/api/runs", status_code=202)
async def submit_run(body: RunRequest, request: Request, settings: SettingsDep) -> Any:
    """Queue a run of flashscope's kernel; identical requests share one run."""
    backend = await request.app.state.runs.ready()
    capability, gpu = None, None
    if body.what == "warpgroups" and backend == "cuda":  # only some GPUs record warpgroups
        capability = await capability_of(request.app.state)
        gpu = (await backend_of(request.app.state))[1]
    errs = check_run_request(body, settings, backend, capability, gpu)
    if errs:
        raise refuse(errs)
    queue = await _queue(request)
    try:
        run, cached = submit(queue, body, request)
    except QueueFull as full:
        return queue_full(full)
    return {
        **run.public(queue.position(run)),
        "cached": cached,
        "links": {"self": f"/api/runs/{run.id}", "events": f"/api/runs/{run.id}/events"},
    }


@router.get("/api/runs/{run_id}")
async def get_run(run_id: RunId, request: Request) -> Any:
    queue = await _queue(request)
    run = queue.get(run_id)
    if run is None:
        raise HTTPException(
            status_code=404,
            detail=f"no run {run_id!r} (runs are kept in "
            "memory and the oldest finished ones are dropped)",
        )
    queue.touch(run)
    return run.public(queue.position(run))


async def _known_run(run_id: RunId, request: Request) -> Run:
    """The run, or 404 (a dependency: it answers before any event of the stream is sent)."""
    run = (await _queue(request)).get(run_id)
    if run is None:
        raise HTTPException(status_code=404, detail=f"no run {run_id!r}")
    return run


@router.get("/api/runs/{run_id}/events", response_class=EventSourceResponse)
async def run_events(
    run: Annotated[Run, Depends(_known_run)], request: Request
) -> AsyncIterator[ServerSentEvent]:
    """Progress of a run: an event per change (state and new messages), then `end`."""
    queue = await _queue(request)
    sent = 0
    last_state = None
    queue.watch(run)  # an open stream keeps the run from being cancelled as unwatched
    try:
        while True:
            if run.state != last_state or len(run.messages) > sent:
                last_state = run.state
                yield ServerSentEvent(
                    event="progress",
                    data={
                        "state": run.state,
                        "position": queue.position(run),
                        "messages": run.messages[sent:],
                    },
                )
                sent = len(run.messages)
            if run.state in FINAL:
                yield ServerSentEvent(event="end", data=run.public())
                return
            if await request.is_disconnected():
                return
            await queue.wait_change(run, timeout=0.25)
    finally:
        queue.unwatch(run)
