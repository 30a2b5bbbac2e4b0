"""The GPU schedule: GET /schedule, its JSON twin GET /api/schedule and its Chrome trace.

One simulation of the timing engine (the checks and limits of POST /api/simulate, the same
422s) turned into what the page draws: CTAs on SMs coloured by wave, SMs busy over time, the
time cursor's table, the CTA time by block (causal imbalance), occupancy and its limiter, the
time by limiter and the roofline. Specs left out of the query keep the preset's values. The
request is checked here; the simulation and its figures are made in a compute worker
(app/compute/tasks.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from flashscope.app.compute.simulation import Parts
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse, value_error
from flashscope.app.routes.health import backend_of
from flashscope.app.routes.runs import RunId, queue_full, submit
from flashscope.app.routes.simulate import check_request, simulated
from flashscope.app.runs.queue import QueueFull
from flashscope.app.schemas.simulate import SimulateRequest
from flashscope.app.schemas.trace import RunRequest, check_run_request
from flashscope.app.schemas.views import SCHEDULE_SPECS, ScheduleParams
from flashscope.app.views import view_at
from flashscope.simulator.core import hardware
from flashscope.simulator.timing.workload import ALGOS

router = APIRouter(tags=["views"])


def _checked(params: ScheduleParams, settings: Settings) -> Parts:
    try:
        body = SimulateRequest.model_validate(params.simulate_body())
    except ValidationError as exc:  # ScheduleParams mirrors its bounds; kept as a safety net
        raise refuse([dict(e, loc=["query", *e["loc"]]) for e in exc.errors()]) from None
    return check_request(body, settings)


async def _schedule(
    request: Request, task: str, params: ScheduleParams, settings: Settings, **extra: Any
) -> Any:
    """Task `task` of the compute pool on this schedule, once its request passed the checks."""
    checked = _checked(params, settings)
    payload = {
        "params": params.model_dump(),
        "timeline_ctas": settings.simulate_max_timeline_ctas,
        **extra,
    }
    return await simulated(request, task, payload, checked, settings)


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


@router.get("/api/schedule", response_model=dict[str, Any])
async def schedule(
    params: Annotated[ScheduleParams, Query()], request: Request, settings: SettingsDep
) -> Response:
    """The simulation's summary plus the figures and tables of the /schedule view."""
    out = await _schedule(request, "schedule", params, settings)
    return Response(out, media_type="application/json")


@router.get("/api/schedule/chrome", response_model=dict[str, Any])
async def schedule_chrome(
    params: Annotated[ScheduleParams, Query()], request: Request, settings: SettingsDep
) -> Response:
    """The simulated schedule in the Trace Event Format: one track per SM, one span per CTA."""
    out = await _schedule(request, "schedule.chrome", params, settings)
    return Response(out, media_type="application/json")


MEASURE_NEEDS_GPU = (
    "a measured schedule needs a GPU (each program's start and end come from its global timer): "
    "this server has none; /compare shows the schedules recorded on an H100 and an H200"
)


def _measurable(params: ScheduleParams, backend: str, device: str | None) -> list[dict[str, Any]]:
    """Why this schedule cannot be measured on this server (empty: it can)."""
    if backend != "cuda":
        return [value_error("gpu", MEASURE_NEEDS_GPU, params.gpu, "body")]
    errs = []
    if params.algo != "fa2":
        why = "the timeline kernel is the FA-2 forward: choose algo fa2 to measure it"
        errs.append(value_error("algo", why, params.algo, "body"))
    if params.specs():
        why = "the GPU runs as it is: leave every spec at its preset to measure"
        errs.append(value_error("sms", why, params.specs(), "body"))
    try:
        here = hardware.resolve(device or "")
    except ValueError:
        here = None
    try:
        chosen = hardware.resolve(params.gpu)
    except ValueError:
        chosen = None
    if here is not None and chosen != here:
        why = f"this server's GPU is the {here} preset: choose it to compare with the measurement"
        errs.append(value_error("gpu", why, params.gpu, "body"))
    return errs


@router.post("/api/schedule/measure", status_code=202)
async def measure_schedule(params: ScheduleParams, request: Request) -> Any:
    """Queue a timeline run of this schedule's forward on the server's GPU (see runs)."""
    settings: Settings = request.app.state.settings
    service = request.app.state.runs
    backend = await service.ready()
    device = (await backend_of(request.app.state))[1]
    errs = _measurable(params, backend, device)
    if errs:
        raise refuse(errs)
    body = RunRequest(
        **{f: getattr(params, f) for f in ("batch", "heads", "kv_heads", "seq", "seq_k")},
        **{f: getattr(params, f) for f in ("head_dim", "causal", "dtype", "block_m")},
        **{f: getattr(params, f) for f in ("block_n", "stages", "warps")},
        mode="fwd",
        what="timeline",
    )
    errs = check_run_request(body, settings, backend)
    if errs:
        raise refuse(errs)
    queue = service.get()
    try:
        run, cached = submit(queue, body, request)
    except QueueFull as full:
        return queue_full(full)
    return {**run.public(queue.position(run)), "cached": cached}


@router.get("/api/schedule/measured/{run_id}", response_model=dict[str, Any])
async def measured(
    run_id: RunId, params: Annotated[ScheduleParams, Query()], request: Request
) -> Response:
    """A finished timeline run beside the engine's schedule of the same launch: the figures."""
    run = request.app.state.runs.find(run_id)
    timeline = ((run.result or {}).get("timeline") if run is not None else None) or None
    if run is None or run.state != "done" or timeline is None:
        raise HTTPException(status_code=404, detail=f"no finished timeline run {run_id!r}")
    settings: Settings = request.app.state.settings
    rec = {**timeline, "device": run.result.get("device"), "date": None, "file": None}
    out = await _schedule(request, "schedule.measured", params, settings, record=rec)
    if out is None:
        raise HTTPException(status_code=404, detail="the simulated launch is not one kernel")
    return Response(out, media_type="application/json")
