"""Memory scaling: GET /memory-scaling and its JSON twin GET /api/memory-scaling.

Peak memory of one forward call of naive attention and of FlashAttention over N (closed forms of
simulator/teach/memory.py), against the memory of the chosen GPU, and where naive attention stops
fitting. When the problem is the one of the shipped measurements (B = 1, H = 16, d = 64, fp16 on
an H100 or H200), the measured peaks come along, marked as such.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.views import MemoryScalingParams, check_memory_scaling
from flashscope.app.views import view_at
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import DTYPE_BYTES, AttentionProblem
from flashscope.simulator.teach.memory import (
    PeakMemory,
    capacity,
    flash_peak,
    largest_fitting,
    load_measured,
    naive_peak,
)

router = APIRouter(tags=["views"])

PARTS = ("Q", "K", "V", "S", "P", "O", "LSE")


@router.get("/memory-scaling", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    measured = load_measured()
    limits = {
        "max_seq": settings.memory_scaling_max_seq,
        "max_batch": settings.memory_scaling_max_batch,
        "max_heads": settings.memory_scaling_max_heads,
        "max_head_dim": settings.max_head_dim,
    }
    return templates.TemplateResponse(
        request,
        "memory_scaling.html",
        {
            "view": view_at("/memory-scaling"),
            "limits": limits,
            "gpus": {k: hardware.PRESETS[k] for k in hardware.names()},
            "dtypes": list(DTYPE_BYTES),
            "dataset": measured,
        },
    )


def sweep(n_min: int, n_max: int) -> list[int]:
    """N from n_min, doubling, up to n_max, which is always the last value."""
    ns, n = [], n_min
    while n < n_max:
        ns.append(n)
        n *= 2
    return [*ns, n_max]


def _series(peaks: list[PeakMemory], cap: int) -> dict[str, Any]:
    return {
        "total": [m.total for m in peaks],
        "beyond_inputs": [m.beyond_inputs for m in peaks],
        "parts": {k: [m.parts.get(k, 0) for m in peaks] for k in PARTS},
        "fits": [m.fits(cap) for m in peaks],
    }


def _measured(p: MemoryScalingParams) -> dict[str, Any] | None:
    """The shipped measurements of this GPU, when they were taken on this very problem."""
    data = load_measured()
    shape = data["problem"]
    same = (p.batch, p.heads, p.d, p.dtype) == (
        shape["batch"],
        shape["heads"],
        shape["head_dim"],
        shape["dtype"],
    )
    key = hardware.resolve(p.gpu)
    device = next((d for d in data["devices"] if hardware.resolve(d["gpu"]) == key), None)
    if not same or device is None:
        return None
    return {
        "device": device["name"],
        "date": data["date"],
        "torch": data["torch"],
        "source": data["source"],
        "what": data["what"],
        "impls": data["impls"],
        "rows": device["rows"],
    }


@router.get("/api/memory-scaling")
def memory_scaling(
    params: Annotated[MemoryScalingParams, Query()], settings: SettingsDep
) -> dict[str, Any]:
    """Peak bytes of naive and flash attention per N, the GPU's memory, and where naive fails."""
    errs = check_memory_scaling(params, settings)
    if errs:
        raise refuse(errs)
    gpu = hardware.PRESETS[hardware.resolve(params.gpu)]
    cap = capacity(gpu.key)
    ns = sweep(params.n_min, params.n_max)

    def problem(n: int) -> AttentionProblem:
        return AttentionProblem(
            seq_q=n, head_dim=params.d, batch=params.batch, heads=params.heads, dtype=params.dtype
        )

    naive = [naive_peak(problem(n)) for n in ns]
    flash = [flash_peak(problem(n)) for n in ns]
    base = problem(1)
    return {
        "params": params.model_dump(),
        "gpu": {
            "key": gpu.key,
            "name": gpu.name,
            "capacity_bytes": cap,
            "source": "simulator/core/hardware.py presets: device memory as sold (decimal GB)",
        },
        "ns": ns,
        "naive": _series(naive, cap),
        "flash": _series(flash, cap),
        "naive_first_oom": next(
            (n for n, m in zip(ns, naive, strict=True) if not m.fits(cap)), None
        ),
        "naive_max_n": largest_fitting(naive_peak, base, cap, settings.memory_scaling_max_seq),
        "flash_max_n": largest_fitting(flash_peak, base, cap, settings.memory_scaling_max_seq),
        "n_search_max": settings.memory_scaling_max_seq,
        "measured": _measured(params),
    }
