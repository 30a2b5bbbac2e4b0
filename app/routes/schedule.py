"""The GPU schedule: GET /schedule, its JSON twin GET /api/schedule and its Chrome trace.

One simulation of the timing engine (the checks and limits of POST /api/simulate, the same
422s) turned into what the page draws: CTAs on SMs coloured by wave, SMs busy over time, the
time cursor's table, the CTA time by block (causal imbalance), occupancy and its limiter, the
time by limiter and the roofline. Specs left out of the query keep the preset's values.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.figures.chrome_trace import from_timeline
from flashscope.app.figures.report import limiter_bars, roofline, summary
from flashscope.app.figures.schedule import (
    cursor,
    gantt_by_wave,
    imbalance,
    occupancy_table,
    shown_sms,
    utilization,
)
from flashscope.app.middleware.errors import refuse
from flashscope.app.routes.simulate import run_request
from flashscope.app.schemas.simulate import SimulateRequest
from flashscope.app.schemas.views import SCHEDULE_SPECS, ScheduleParams
from flashscope.app.views import view_at
from flashscope.simulator.core import hardware
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import ALGOS

router = APIRouter(tags=["views"])

CURSOR_STEPS = 100  # the time cursor stops at 0 %, 1 %, …, 100 % of the run


def _run(params: ScheduleParams, settings: Settings) -> SimResult:
    try:
        body = SimulateRequest.model_validate(params.simulate_body())
    except ValidationError as exc:  # ScheduleParams mirrors its bounds; kept as a safety net
        raise refuse([dict(e, loc=["query", *e["loc"]]) for e in exc.errors()]) from None
    return run_request(body, settings)


@router.get("/schedule", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    limits = {
        "max_batch": settings.simulate_max_batch,
        "max_heads": settings.simulate_max_heads,
        "max_seq": settings.simulate_max_seq,
        "max_head_dim": settings.simulate_max_head_dim,
        "min_block": settings.simulate_min_block,
        "max_block": settings.simulate_max_block,
        "hardware_factor": settings.simulate_max_hardware_factor,
        "max_ctas": settings.simulate_max_ctas,
        "max_timeline_ctas": settings.simulate_max_timeline_ctas,
    }
    return templates.TemplateResponse(
        request,
        "schedule.html",
        {
            "view": view_at("/schedule"),
            "limits": limits,
            "gpus": {k: hardware.PRESETS[k] for k in hardware.names()},
            "algos": ALGOS,
            "specs": SCHEDULE_SPECS,
        },
    )


@router.get("/api/schedule")
def schedule(params: Annotated[ScheduleParams, Query()], settings: SettingsDep) -> dict[str, Any]:
    """The simulation's summary plus the figures and tables of the /schedule view."""
    result = _run(params, settings)
    table = cursor(result, CURSOR_STEPS)
    imb = imbalance(result)
    return {
        **summary(result),
        "params": params.model_dump(),
        "gpu_specs": result.gpu.specs(),
        "edited": sorted(params.specs()),
        "cursor": table,
        "occupancy": occupancy_table(result),
        "imbalance": {k: v for k, v in imb.items() if k != "figure"},
        "figures": {
            "gantt": gantt_by_wave(result, settings.simulate_max_timeline_ctas),
            "utilization": utilization(table),
            "imbalance": imb["figure"],
            "limiter": limiter_bars(result),
            "roofline": roofline(result),
        },
    }


@router.get("/api/schedule/chrome")
def schedule_chrome(
    params: Annotated[ScheduleParams, Query()], settings: SettingsDep
) -> dict[str, Any]:
    """The simulated schedule in the Trace Event Format: one track per SM, one span per CTA."""
    result = _run(params, settings)
    return from_timeline(result, shown_sms(result, settings.simulate_max_timeline_ctas))
