"""GET /api/health: liveness, version and which backend the kernels would use."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from flashscope.app import __version__
from flashscope.app.schemas.trace import Health

router = APIRouter(tags=["health"])


def _probe() -> tuple[str, str | None]:
    from flashscope.kernels.device import describe

    info = describe()
    return info["backend"], info["gpu"]


@router.get("/api/health", response_model=Health)
async def health(request: Request) -> Health:
    state = request.app.state
    if getattr(state, "backend", None) is None:
        state.backend = await run_in_threadpool(_probe)
    backend, gpu = state.backend
    return Health(status="ok", version=__version__, backend=backend, gpu=gpu)
