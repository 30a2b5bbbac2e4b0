"""The timing engine over HTTP: POST /api/simulate runs one simulation, GET /api/hardware lists
the GPU presets with every figure the engine uses (datasheet fields and efficiencies)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from fastapi import APIRouter

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep
from flashscope.app.figures.report import gantt, summary
from flashscope.app.middleware.errors import limit_error, refuse, value_error
from flashscope.app.schemas.simulate import SimulateRequest, check_simulate_request
from flashscope.simulator.core import hardware
from flashscope.simulator.core.calibration import calibration_path
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import simulate_workload
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import build, ctas_of

router = APIRouter(tags=["simulate"])


def _field(message: str, default: str) -> str:
    """The request field a simulator ValueError names first (its messages start with it)."""
    m = re.match(r"(\w+)", message)
    return m.group(1) if m else default


@router.post("/api/simulate")
def post_simulate(body: SimulateRequest, settings: SettingsDep) -> Any:
    """Simulate an algorithm on a GPU: time, bytes per memory level, occupancy, limiters."""
    result = run_request(body, settings)
    out = summary(result)
    if body.timeline:
        out["timeline"] = gantt(result, settings.simulate_max_timeline_ctas)
    return out


def run_request(body: SimulateRequest, settings: Settings) -> SimResult:
    """Check a simulation request against the limits and run it; 422 (HTTPException) if not."""
    errs = check_simulate_request(body, settings)
    if errs:
        raise refuse(errs)
    problem = AttentionProblem(
        seq_q=body.seq,
        seq_k=body.seq_k,
        head_dim=body.head_dim,
        batch=body.batch,
        heads=body.heads,
        kv_heads=body.kv_heads,
        causal=body.causal,
        dtype=body.dtype,
    )
    tiles = TileConfig(body.block_m, body.block_n, body.stages, body.warps, body.maxnreg)
    try:
        gpu = hardware.from_name(body.gpu)
        if body.hardware:
            gpu = hardware.custom(gpu, **body.hardware)
    except ValueError as exc:
        field = _field(str(exc), "hardware")
        raise refuse([value_error(field, str(exc), body.hardware, "body")]) from None
    dq = {"block_m": body.dq_block_m, "block_n": body.dq_block_n, "stages": body.dq_stages,
          "warps": body.dq_warps}  # fmt: skip
    given = {k: v for k, v in dq.items() if v is not None}
    dq_tiles = replace(tiles, **given) if given else None  # the register cap carries over
    kernels: dict[str, Any] = {"gpu_key": gpu.key, "route": body.route, "dq_tiles": dq_tiles}
    if body.impl == "flashscope":
        ctas = kernelplan.ctas_of(body.algo, problem, tiles, **kernels)
    else:
        ctas = ctas_of(body.algo, problem, tiles, sms=gpu.sms, splits=body.splits)
    if ctas > settings.simulate_max_ctas:
        msg = (
            f"these sizes launch {ctas} CTAs; the limit is {settings.simulate_max_ctas}: "
            "use larger blocks or a smaller problem"
        )
        raise refuse([limit_error("seq", msg, body.seq, settings.simulate_max_ctas, "body")])
    try:
        if body.impl == "flashscope":
            workload = kernelplan.build(body.algo, problem, tiles, **kernels)
        else:
            workload = build(body.algo, problem, tiles, gpu.sms, body.splits)
        result = simulate_workload(workload, gpu)
    except ValueError as exc:  # tiles that do not fit in shared memory, too many warps
        field = "warps" if str(exc).startswith("warps") else "block_m"
        limit = gpu.smem_per_block if field == "block_m" else gpu.max_warps_per_sm
        raise refuse([limit_error(field, str(exc), getattr(body, field), limit, "body")]) from None
    return result


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
