"""HTML pages. Each has a JSON twin under /api (listed by GET /api/views).

The three trace steppers (/tiles, /backward, /decode) draw GET /api/trace and /ws/trace.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.views import VIEWS, view_at
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import DTYPE_BYTES

router = APIRouter(tags=["pages"])


def _trace_limits(settings: Settings) -> dict[str, Any]:
    return {
        "max_seq": settings.max_seq,
        "max_head_dim": settings.max_head_dim,
        "min_block": settings.min_block,
        "max_block": settings.max_block,
        "max_seed": settings.max_seed,
        "max_group": settings.max_group,
        "max_splits": settings.max_splits,
        "max_decode_rows": settings.max_decode_rows,
        "max_decode_cache": settings.max_decode_cache,
        "max_trace_events": settings.max_trace_events,
    }


def _stepper(
    request: Request, templates: Jinja2Templates, settings: Settings, path: str, template: str
) -> HTMLResponse:
    context = {
        "view": view_at(path),
        "limits": _trace_limits(settings),
        "dtypes": list(DTYPE_BYTES),
        "gpus": {k: hardware.PRESETS[k] for k in hardware.names()},
    }
    return templates.TemplateResponse(request, template, context)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def home(request: Request, templates: TemplatesDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"views": VIEWS})


@router.get("/tiles", response_class=HTMLResponse, include_in_schema=False)
async def tiles(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    return _stepper(request, templates, settings, "/tiles", "tiles.html")


@router.get("/backward", response_class=HTMLResponse, include_in_schema=False)
async def backward(
    request: Request, templates: TemplatesDep, settings: SettingsDep
) -> HTMLResponse:
    return _stepper(request, templates, settings, "/backward", "backward.html")


@router.get("/decode", response_class=HTMLResponse, include_in_schema=False)
async def decode(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    return _stepper(request, templates, settings, "/decode", "decode.html")


@router.get("/api/views", tags=["pages"])
async def views() -> list[dict[str, Any]]:
    """The views, each with its JSON twin."""
    return [{"path": v.path, "title": v.title, "summary": v.summary, "api": v.api} for v in VIEWS]
