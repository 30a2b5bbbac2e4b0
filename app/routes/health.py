"""GET /api/health: liveness, version, which backend the kernels would use, and what is degraded.

The answer is HTTP 200 whenever the process serves: a room store (Redis) that does not answer
makes it `degraded`, with the reason, since every page and computation still works and a
restarted container would not bring Redis back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from flashscope.app import __version__
from flashscope.app.schemas.trace import Health

router = APIRouter(tags=["health"])


def _probe() -> tuple[str, str | None]:
    from flashscope.kernels.device import describe

    info = describe()
    return info["backend"], info["gpu"]


def label(backend: str, gpu: str | None) -> str:
    """What the server runs on, in the words of every page's header badge."""
    if backend == "cuda":
        return f"GPU: {gpu}"
    return "CPU: simulator and Triton interpreter"


async def _once(state: Any, name: str, probe: Callable[[], Any]) -> Any:
    """`state.<name>`, set by `probe` (run in a thread, off the event loop) while it is None.
    Probes that overlap (the start-up one and a first request) keep the first answer stored: a
    late one does not overwrite it."""
    if getattr(state, name, None) is None:
        found = await run_in_threadpool(probe)
        if getattr(state, name, None) is None:
            setattr(state, name, found)
    return getattr(state, name)


async def backend_of(state: Any) -> tuple[str, str | None]:
    """(backend, GPU name), probed once (torch loads in a thread)."""
    return await _once(state, "backend", _probe)  # type: ignore[no-any-return]


def _capability() -> str:
    from flashscope.kernels.device import has_cuda

    if not has_cuda():
        return ""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}"


async def capability_of(state: Any) -> str | None:
    """The GPU's compute capability ("9.0"), probed once like the backend; None without a GPU
    that torch can see."""
    return await _once(state, "capability", _capability) or None


@router.get("/api/health", response_model=Health)
async def health(request: Request) -> Health:
    backend, gpu = await backend_of(request.app.state)
    reasons = await request.app.state.rooms.problems()
    return Health(
        status="degraded" if reasons else "ok",
        reasons=reasons,
        version=__version__,
        backend=backend,  # type: ignore[arg-type]
        gpu=gpu,
        label=label(backend, gpu),
        live_timing=backend == "cuda",
    )
