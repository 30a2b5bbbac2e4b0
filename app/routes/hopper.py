"""FlashAttention-3 on Hopper: GET /hopper and its JSON twin GET /api/hopper.

The twin runs the FA-3 model (simulator/timing/fa3.py) on one launch of the warp-specialized
forward and sets beside it what the shipped dataset measured on that GPU: the recorded
warpgroup timeline of the same variant and its time (or the nearest variant's, labelled), plus
FA-1 and FA-2 of the timing engine on the same problem and the FP8 what-if. The request is
checked here; the simulations run in a compute worker (app/compute/tasks.py, task "hopper").
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.hopper import HEAD_DIMS, HOPPER_GPUS, HopperParams, check_hopper
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
    payload = {"params": params.model_dump(), "folder": str(settings.datasets_dir)}
    try:
        out = await run_task(request, "hopper", payload)
    except TaskError as exc:
        raise pool_errors(exc, settings, field=None) from None
    return Response(out, media_type="application/json")
