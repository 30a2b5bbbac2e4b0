"""FlashAttention-3 on Hopper: GET /hopper and its JSON twin GET /api/hopper.

The twin runs the FA-3 model (simulator/timing/fa3.py) on one launch of the warp-specialized
forward and sets beside it what the shipped dataset measured on that GPU: the recorded
warpgroup timeline of the same variant and its time (or the nearest variant's, labelled), plus
FA-1 and FA-2 of the timing engine on the same problem and the FP8 what-if. The request is
checked here; the simulations run in a compute worker (app/compute/tasks.py, task "hopper").

Live: the answer says whether this server can record the launch on its own GPU (`record`: an
H100 or H200 whose preset is the one chosen, and the POST /api/runs body that does it, what
warpgroups); with `run`, the id of such a finished run, its recording replaces the shipped one.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse, value_error
from flashscope.app.routes.health import backend_of, capability_of
from flashscope.app.schemas.hopper import HEAD_DIMS, HOPPER_GPUS, HopperParams, check_hopper
from flashscope.app.schemas.trace import RunRequest, check_run_request
from flashscope.app.views import view_at
from flashscope.simulator.core import hardware

router = APIRouter(tags=["views"])


@router.get("/hopper", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    limits = {"max_seq": settings.simulate_max_seq, "max_batch": settings.simulate_max_batch,
              "max_heads": settings.simulate_max_heads}  # fmt: skip
    return templates.TemplateResponse(
        request,
        "hopper.html",
        {
            "view": view_at("/hopper"),
            "limits": limits,
            "gpus": {k: hardware.PRESETS[k] for k in HOPPER_GPUS},
            "head_dims": HEAD_DIMS,
        },
    )


@router.get("/api/hopper", response_model=dict[str, Any])
async def hopper(
    params: Annotated[HopperParams, Query()], request: Request, settings: SettingsDep
) -> Response:
    """The FA-3 model of one launch beside the measured warpgroup timeline and time of the same
    variant on that GPU (where the shipped data has it), FA-1 and FA-2 on the same problem, and
    the FP8 what-if with its error against exact attention."""
    errs = check_hopper(params, settings)
    if errs:
        raise refuse(errs)
    payload = {
        "params": params.model_dump(),
        "folder": str(settings.datasets_dir),
        "record": await recording(params, request, settings),
        "live": live_recording(params, request),
    }
    try:
        out = await run_task(request, "hopper", payload)
    except TaskError as exc:
        raise pool_errors(exc, settings, field=None) from None
    return Response(out, media_type="application/json")


async def recording(params: HopperParams, request: Request, settings: Settings) -> dict[str, Any]:
    """Whether this server can record `params`' launch live, and if so the POST /api/runs body
    that does (`request`), else why not (`why`: the run's own refusals, or another preset than
    the server's GPU chosen)."""
    out: dict[str, Any] = {"available": False, "why": None, "device": None, "request": None}
    if params.dtype == "fp8":
        out["why"] = "fp8 is a what-if: flashscope's Hopper forward runs fp16 and bf16"
        return out
    state = request.app.state
    backend = await state.runs.ready()
    capability, gpu = None, None
    if backend == "cuda":
        capability, gpu = await capability_of(state), (await backend_of(state))[1]
    out["device"] = gpu
    try:
        body = RunRequest.model_validate(params.run_request())
    except ValidationError as exc:
        out["why"] = "; ".join(str(e["msg"]) for e in exc.errors())
        return out
    errs = check_run_request(body, settings, backend, capability, gpu)
    try:
        here = hardware.resolve(gpu or "")
    except ValueError:
        here = None  # a GPU without a preset (or none): nothing to compare the choice with
    if here is not None and here != params.gpu_key():
        why = (f"this server's GPU is the {hardware.PRESETS[here].name}: choose it to record "
               "beside its model")  # fmt: skip
        errs.append(value_error("gpu", why, params.gpu))
    if errs:
        out["why"] = "; ".join(str(e["msg"]) for e in errs)
    else:
        out.update(available=True, request=body.model_dump())
    return out


def live_recording(params: HopperParams, request: Request) -> dict[str, Any] | None:
    """The finished live recording `params.run` names, if it recorded this very launch:
    {run, finished, warpgroups}; else {run, why}. None without `run`."""
    if params.run is None:
        return None
    run = request.app.state.runs.find(params.run)
    why = None
    if run is None:
        why = (
            "the server no longer has this live recording (finished runs are kept in memory, "
            "the oldest dropped): record it again"
        )
    elif run.state != "done" or not (run.result or {}).get("warpgroups"):
        why = f"run {params.run} is not a finished warpgroup recording (it is {run.state})"
    elif params.dtype == "fp8" or any(
        run.request.get(k) != v for k, v in params.run_request().items()
    ):
        why = "the live recording is of another configuration than the one chosen"
    if why is not None or run is None or run.result is None:
        return {"run": params.run, "why": why}
    return {"run": run.id, "finished": run.finished, "warpgroups": run.result["warpgroups"]}
