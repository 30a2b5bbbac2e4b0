"""The memory wall: GET /memory-wall and its JSON twin GET /api/memory-wall.

The twin returns both walks (naive and FlashAttention-2, one tile-sized step each) with running
HBM counters and the step at which every tile changes state, plus the access table over N;
`format=chrome` returns the walks as a Chrome/Perfetto trace instead. The request is checked
here; the walks are made in a compute worker (app/compute/tasks.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.views import MemoryWallParams, check_memory_wall
from flashscope.app.views import view_at

router = APIRouter(tags=["views"])


@router.get("/memory-wall", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    limits = {
        "max_seq": settings.memory_wall_max_seq,
        "max_head_dim": settings.max_head_dim,
        "min_block": settings.min_block,
        "max_block": settings.max_block,
        "max_steps": settings.memory_wall_max_steps,
    }
    return templates.TemplateResponse(
        request, "memory_wall.html", {"view": view_at("/memory-wall"), "limits": limits}
    )


@router.get("/api/memory-wall", response_model=dict[str, Any])
async def memory_wall(
    params: Annotated[MemoryWallParams, Query()], request: Request, settings: SettingsDep
) -> Response:
    """Naive and FlashAttention-2 walks of one (batch, head), and the HBM access table over N."""
    ns, errs = check_memory_wall(params, settings)
    if errs:
        raise refuse(errs)
    try:
        out = await run_task(request, "memory_wall", {"params": params.model_dump(), "ns": ns})
    except TaskError as exc:
        raise pool_errors(exc, settings, field=None) from None
    return Response(out, media_type="application/json")
