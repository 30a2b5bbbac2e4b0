"""HTML pages. Each has a JSON twin under /api (listed by GET /api/views)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..deps import SettingsDep, TemplatesDep
from ..views import VIEWS

router = APIRouter(tags=["pages"])


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def home(request: Request, templates: TemplatesDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"views": VIEWS})


@router.get("/tiles", response_class=HTMLResponse, include_in_schema=False)
async def tiles(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    limits = {
        "max_seq": settings.max_seq,
        "max_head_dim": settings.max_head_dim,
        "min_block": settings.min_block,
        "max_block": settings.max_block,
        "max_seed": settings.max_seed,
    }
    return templates.TemplateResponse(request, "tiles.html", {"view": VIEWS[0], "limits": limits})


@router.get("/api/views", tags=["pages"])
async def views() -> list[dict]:
    """The views, each with its JSON twin."""
    return [{"path": v.path, "title": v.title, "summary": v.summary, "api": v.api} for v in VIEWS]
