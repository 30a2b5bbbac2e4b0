"""The API reference at /docs: Swagger UI over /openapi.json, served from this server alone.

FastAPI's own /docs page loads Swagger UI from a CDN and starts it with an inline script, both of
which the Content-Security-Policy (app/main.py) refuses. This page loads the copy vendored in
static/vendor/ (its version in the file names) and starts it from static/js/docs.js.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from flashscope.app.deps import TemplatesDep

router = APIRouter(tags=["pages"])


@router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
async def docs(request: Request, templates: TemplatesDep) -> HTMLResponse:
    """Swagger UI: every operation of /openapi.json, to read and to try."""
    return templates.TemplateResponse(request, "docs.html", {})
