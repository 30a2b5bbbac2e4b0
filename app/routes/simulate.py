"""The timing engine over HTTP: POST /api/simulate runs one simulation, GET /api/hardware lists
the GPU presets with every figure the engine uses (datasheet fields and efficiencies), GET
/api/compiled says where the kernels compiled on demand stand (app/compute/compiling.py).

The request is checked here, in the server (every limit, the GPU it edits, the CTAs it would
launch); the simulation runs in a compute worker (app/compute/tasks.py), which sends back the
response body ready to go.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.compute.simulation import Parts, gpu_of, parts
from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep
from flashscope.app.middleware.errors import limit_error, refuse, value_error
from flashscope.app.schemas.simulate import SimulateRequest, check_simulate_request
from flashscope.simulator.core import hardware
from flashscope.simulator.core.calibration import calibration_path
from flashscope.simulator.timing import compiled, ondemand

router = APIRouter(tags=["simulate"])


def _field(message: str, default: str) -> str:
    """The request field a simulator ValueError names first (its messages start with it)."""
    m = re.match(r"(\w+)", message)
    return m.group(1) if m else default


@router.post("/api/simulate")
async def post_simulate(body: SimulateRequest, request: Request, settings: SettingsDep) -> Any:
    """Simulate an algorithm on a GPU: time, bytes per memory level, occupancy, limiters
    (algo fa3: the FA-3 model's time, busy fractions and a program's warpgroup timeline)."""
    checked = check_request(body, settings)
    payload = {"body": body.model_dump(), "timeline_ctas": settings.simulate_max_timeline_ctas}
    out = await simulated(request, "simulate", payload, checked, settings)
    return Response(out, media_type="application/json")


def check_request(body: SimulateRequest, settings: Settings) -> Parts:
    """Check a simulation request against the limits (cheap: nothing is simulated); its parts,
    or 422 (RequestValidationError) naming the field."""
    errs = check_simulate_request(body, settings)
    if errs:
        raise refuse(errs)
    try:
        gpu = gpu_of(body)
    except ValueError as exc:
        field = _field(str(exc), "hardware")
        raise refuse([value_error(field, str(exc), body.hardware, "body")]) from None
    checked = parts(body, gpu)
    ctas = checked.ctas()
    if body.algo == "fa3":
        programs = checked.fa3_programs()
        program = body.fa3_options()["program"]
        if program >= programs and ctas <= settings.simulate_max_ctas:
            msg = f"program must be below {programs} (the programs of this launch), got {program}"
            raise refuse([limit_error("program", msg, program, programs - 1, "body")])
    if ctas > settings.simulate_max_ctas:
        msg = (
            f"these sizes launch {ctas} CTAs; the limit is {settings.simulate_max_ctas}: "
            "use larger blocks or a smaller problem"
        )
        raise refuse([limit_error("seq", msg, body.seq, settings.simulate_max_ctas, "body")])
    return checked


async def simulated(
    request: Request, task: str, payload: dict[str, Any], checked: Parts, settings: Settings
) -> Any:
    """Run a simulation task in the compute pool: its result (a JSON body), or the error it
    answers: a kernel that cannot launch names block_m (shared memory) or warps, with the GPU's
    limit; any other input error answers as the app's ValueError handler does. Where kernels
    are compiled on demand, those of the run that no table holds are asked for first; the task
    reads the cache and says which are still compiling."""
    if settings.compile_on_demand:
        root = settings.compile_cache_dir
        payload["compile_cache"] = str(root)
        states = request.app.state.compiler.request(checked.compile_candidates(root))
        payload["compiling"] = {k: v for k, v in states.items() if v != "done"}
    try:
        out = await run_task(request, task, payload)
    except TaskError as exc:
        if exc.kind != "DoesNotFit":
            raise pool_errors(exc, settings, field=None) from None
        body, gpu = checked.body, checked.gpu
        field = "warps" if str(exc).startswith("warps") else "block_m"
        limit = gpu.smem_per_block if field == "block_m" else gpu.max_warps_per_sm
        raise refuse([limit_error(field, str(exc), getattr(body, field), limit, "body")]) from None
    return out


@router.get("/api/compiled")
def get_compiled(
    request: Request,
    settings: SettingsDep,
    key: Annotated[list[str], Query(description="compiled-kernel keys (repeat the parameter)")],
) -> Any:
    """Where kernels asked for compiling stand (a simulation's `compiling` names them): done
    (the next simulation takes the binary's figures), failed, pending, timeout, queue-full, or
    unknown (never asked for); "off" where the server compiles nothing on demand."""
    limit = settings.compile_max_status_keys
    if len(key) > limit:
        msg = f"at most {limit} keys per request, got {len(key)}"
        raise refuse([limit_error("key", msg, len(key), limit)])
    errs = []
    for k in key:
        try:
            ondemand.parse_key(k)
        except ValueError as exc:
            errs.append(value_error("key", str(exc), k))
    if errs:
        raise refuse(errs)
    compiler = request.app.state.compiler
    on = settings.compile_on_demand
    return {
        "on_demand": on,
        "triton": compiled.triton_version(),
        "keys": {k: compiler.state(k) if on else "off" for k in key},
    }


@router.get("/api/hardware")
def get_hardware() -> Any:
    """Every GPU preset: datasheet figures, efficiencies, aliases, and whether a calibration
    file overrides the default efficiencies."""
    aliases: dict[str, list[str]] = {key: [] for key in hardware.names()}
    for alias, key in hardware.ALIASES.items():
        if alias != key.replace("-", ""):
            aliases[key].append(alias)
    return {
        "default": "h100-sxm",
        "fields": {
            "hardware": list(hardware.GPU_FIELDS),
            "efficiency": list(hardware.EFFICIENCY_FIELDS),
        },
        "gpus": [
            {
                **hardware.from_name(key).specs(),
                "aliases": aliases[key],
                "calibrated": calibration_path(key).is_file(),
            }
            for key in hardware.names()
        ],
    }
