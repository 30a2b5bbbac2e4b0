"""A route's side of the compute pool: a task run for an HTTP request, cancelled when its client
disconnects, and the pool's refusals as HTTP answers that name the setting behind them.

    the client has `compute_max_pending_per_client` tasks already → 429 with Retry-After
    the server has `compute_max_pending` tasks already             → 503 with Retry-After
    the task ran past `compute_timeout_s` (its worker was killed)  → 504
    the task refused its input (ValueError, MemoryError)           → 422 naming `field`
    the worker died under the task                                 → 503
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError

from flashscope.app.compute.pool import Busy, Cancelled, TaskError, TooSlow, WorkerPool
from flashscope.app.config import Settings
from flashscope.app.middleware.errors import refuse, value_error
from flashscope.app.middleware.identity import address_key, client_key

log = logging.getLogger("flashscope.compute")


def disconnected(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the request's client has gone (the pool asks while the task waits or runs)."""

    async def gone() -> bool:
        return await request.is_disconnected()

    return gone


def _refusal(
    status: int, kind: str, msg: str, limit: Any, retry: int | None = None
) -> HTTPException:
    detail = [{"type": kind, "loc": ["request"], "field": None, "msg": msg, "limit": limit}]
    headers = {"Retry-After": str(retry)} if retry is not None else None
    return HTTPException(status, detail, headers=headers)


def pool_errors(
    exc: Exception, settings: Settings, field: str | None = "params"
) -> HTTPException | RequestValidationError | ValueError:
    """What a compute-pool failure answers (see the module docstring). An input error with
    `field` None is a plain ValueError, which the app's handler answers like any other."""
    if isinstance(exc, Busy) and exc.client:
        name = f"compute_max_pending_per_{exc.who}"
        limit = getattr(settings, name)
        whose = "this client has" if exc.who == "client" else "this address has"
        msg = (
            f"{whose} {exc.pending} costly requests waiting or running, the most it may "
            f"(FLASHSCOPE_{name.upper()}); retry after {exc.retry_after} s"
        )
        return _refusal(429, "busy", msg, limit, exc.retry_after)
    if isinstance(exc, Busy):
        msg = (
            f"the server is busy with {exc.pending} costly requests, the most it takes "
            f"(FLASHSCOPE_COMPUTE_MAX_PENDING); retry after {exc.retry_after} s"
        )
        return _refusal(503, "busy", msg, settings.compute_max_pending, exc.retry_after)
    if isinstance(exc, TooSlow):
        msg = (
            f"the request took longer than {settings.compute_timeout_s:g} s "
            "(FLASHSCOPE_COMPUTE_TIMEOUT_S) and was stopped: ask for a smaller problem"
        )
        return _refusal(504, "timeout", msg, settings.compute_timeout_s)
    if isinstance(exc, TaskError) and exc.kind in ("ValueError", "MemoryError"):
        if field is None:
            return ValueError(str(exc))
        return refuse([value_error(field, str(exc), None)])
    if isinstance(exc, TaskError) and exc.kind != "WorkerLost":
        log.error("compute task failed: %s: %s", exc.kind, exc)
        return HTTPException(500, "a compute task failed; the server's log has the details")
    return HTTPException(503, str(exc))


async def run_task(
    request: Request, name: str, payload: Any, *, affinity: int | None = None
) -> Any:
    """Task `name`'s result for this request, from the app's compute pool. Busy, TooSlow and
    Cancelled become HTTP errors; a TaskError is raised for the route to answer (`pool_errors`
    answers most)."""
    pool: WorkerPool = request.app.state.pool
    try:
        return await pool.run(
            name,
            payload,
            affinity=affinity,
            gone=disconnected(request),
            client=client_key(request.scope),
            address=address_key(request.scope),
        )
    except (Busy, TooSlow, Cancelled) as exc:
        raise pool_errors(exc, request.app.state.settings) from None
