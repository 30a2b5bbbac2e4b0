"""HTML pages. Each has a JSON twin under /api (listed by GET /api/views).

The three trace steppers (/tiles, /backward, /decode) draw GET /api/trace and /ws/trace. The
course (/learn, /learn/{id}) reads its lessons from app/lessons.py; GET /api/learn is its twin.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from flashscope.app import lessons
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.views import VIEWS, View, view_at
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


# The order of the navigation bar (templates/_partials/nav.html): the home page lists the views
# in it, then the views the bar does not show.
NAV_ORDER = (
    "/learn",
    "/tiles",
    "/memory-wall",
    "/online-softmax",
    "/memory-scaling",
    "/backward",
    "/decode",
    "/schedule",
    "/hopper",
    "/compare",
    "/glossary",
)


def in_nav_order(views: tuple[View, ...]) -> list[View]:
    """`views` in the navigation bar's order, the others after them in registry order."""
    rank = {path: k for k, path in enumerate(NAV_ORDER)}
    return sorted(views, key=lambda v: rank.get(v.path, len(rank)))


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def home(request: Request, templates: TemplatesDep) -> HTMLResponse:
    context = {
        "views": in_nav_order(VIEWS),
        "first_lesson": lessons.LESSONS[0],
        "first_url": lessons.lesson_url(lessons.LESSONS[0]),
        "n_lessons": len(lessons.LESSONS),
    }
    return templates.TemplateResponse(request, "index.html", context)


@router.get("/learn", response_class=HTMLResponse, include_in_schema=False)
async def learn(request: Request, templates: TemplatesDep) -> HTMLResponse:
    course = [lessons.as_json(lesson, k) for k, lesson in enumerate(lessons.LESSONS)]
    return templates.TemplateResponse(
        request, "learn.html", {"view": view_at("/learn"), "course": course, "lesson": None}
    )


@router.get("/learn/{lesson_id}", response_class=HTMLResponse, include_in_schema=False)
async def lesson_page(lesson_id: str, request: Request, templates: TemplatesDep) -> HTMLResponse:
    found = lessons.lesson_at(lesson_id)
    if found is None:
        raise HTTPException(404, f"no lesson {lesson_id!r}: GET /api/learn lists them")
    k, lesson = found
    course = [lessons.as_json(x, i) for i, x in enumerate(lessons.LESSONS)]
    context = {
        "view": view_at("/learn"),
        "course": course,
        "lesson": course[k],
        "figure": view_at(lesson.view) if lesson.view else None,
    }
    return templates.TemplateResponse(request, "learn.html", context)


@router.get("/api/learn", tags=["pages"])
async def learn_api() -> dict[str, Any]:
    """The course: its lessons in order, each with its view, narrative, try-this links (URL
    state of the view), check question and neighbours."""
    return {
        "lessons": [lessons.as_json(lesson, k) for k, lesson in enumerate(lessons.LESSONS)],
    }


@router.get("/api/learn/{lesson_id}", tags=["pages"])
async def lesson_api(lesson_id: str) -> dict[str, Any]:
    """One lesson of the course (404 for an unknown id)."""
    found = lessons.lesson_at(lesson_id)
    if found is None:
        raise HTTPException(404, f"no lesson {lesson_id!r}: GET /api/learn lists them")
    return lessons.as_json(found[1], found[0])


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


def glossary_terms(templates: Jinja2Templates) -> list[dict[str, Any]]:
    """The glossary's terms, as templates/_partials/glossary.html writes them (in its order)."""
    module = templates.env.get_template("_partials/glossary.html").module
    terms: list[dict[str, Any]] = module.TERMS  # type: ignore[attr-defined]
    return terms


@router.get("/glossary", response_class=HTMLResponse, include_in_schema=False)
async def glossary(request: Request, templates: TemplatesDep) -> HTMLResponse:
    titles = {v.path: v.title for v in VIEWS}
    return templates.TemplateResponse(request, "glossary.html", {"view_titles": titles})


@router.get("/api/glossary", tags=["pages"])
async def glossary_api(templates: TemplatesDep) -> list[dict[str, Any]]:
    """The glossary: each term's id (its anchor on /glossary), the term, its name, a one-sentence
    tip, the fuller text and the views that show it."""
    return glossary_terms(templates)


@router.get("/api/views", tags=["pages"])
async def views() -> list[dict[str, Any]]:
    """The views, each with its JSON twin."""
    return [{"path": v.path, "title": v.title, "summary": v.summary, "api": v.api} for v in VIEWS]
