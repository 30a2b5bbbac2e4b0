"""Measured against simulated: GET /compare and its JSON twin GET /api/compare.

The figures come from the validation datasets shipped in Settings.datasets_dir (measured on real
GPUs, with device, date and versions), so the comparison works without a GPU. For the chosen
configuration the engine runs again (same engine, same calibration as the shipped rows unless those
changed since) to draw its SM timeline and to explain the gap (simulator/calibrate/explain.py):
the route picks the row here, a compute worker simulates and explains it (app/compute/tasks.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.datasets import SWEEPS, Datasets, dataset_key, sweep_of
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import limit_error, refuse
from flashscope.app.views import view_at
from flashscope.simulator.core import hardware

router = APIRouter(tags=["views"])


class CompareParams(BaseModel):
    """Which dataset and which of its configurations."""

    model_config = ConfigDict(extra="forbid")

    gpu: str | None = Field(None, max_length=40, description="GPU preset of the dataset.")
    sweep: Literal["protocol", "users", "fresh"] | None = Field(
        None,
        description="The sweep the dataset measured: the papers' protocol (the default), "
        "the space users meet (its held-out half is the headline), or fresh shapes drawn "
        "after the engine was fitted (all rows held out).",
    )
    id: str | None = Field(None, max_length=80, description="Configuration to explain.")


def _datasets(request: Request) -> Datasets:
    datasets: Datasets = request.app.state.datasets
    return datasets


def choose(
    params: CompareParams, data: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dataset and the row the parameters name (the worst-predicted row by default)."""
    if not data:
        raise HTTPException(
            status_code=404,
            detail="no validation dataset in the results folder (FLASHSCOPE_DATASETS_DIR)",
        )
    # unnamed: the protocol's, or where there is none (a folder of other sweeps) the first's
    sweep = params.sweep or ("protocol" if any(":" not in k for k in data) else
                             sorted(data)[0].partition(":")[2])  # fmt: skip
    gpus = sorted({d["gpu"] for k, d in data.items() if k == dataset_key(d["gpu"], sweep)})
    gpu = params.gpu
    if gpu is not None:
        try:
            gpu = hardware.resolve(gpu)
        except ValueError:
            gpu = None
    if params.gpu is not None and gpu not in gpus:
        choices = gpus or sorted({d["gpu"] for d in data.values()})
        raise refuse(
            [
                limit_error(
                    "gpu",
                    f"no dataset of the {sweep} sweep for gpu {params.gpu!r}; choose one of "
                    f"{', '.join(choices)}",
                    params.gpu,
                    choices,
                )
            ]
        )
    if not gpus:
        sweeps = sorted({k.partition(":")[2] or "protocol" for k in data})
        raise refuse(
            [
                limit_error(
                    "sweep",
                    f"no dataset of the {sweep} sweep; choose one of {', '.join(sweeps)}",
                    sweep,
                    sweeps,
                )
            ]
        )
    ds = data[dataset_key(gpu or ("h100-sxm" if "h100-sxm" in gpus else gpus[0]), sweep)]
    rows = ds["rows"]
    if params.id is None:
        scored = [r for r in rows if r.get("error_pct") is not None]
        return ds, max(scored or rows, key=lambda r: abs(r.get("error_pct") or 0.0))
    row = next((r for r in rows if r["id"] == params.id), None)
    if row is None:
        raise refuse(
            [
                limit_error(
                    "id",
                    f"no configuration {params.id!r} in the {ds['gpu']} dataset",
                    params.id,
                    f"{len(rows)} ids, e.g. {rows[0]['id']}",
                )
            ]
        )
    return ds, row


@router.get("/api/compare", response_model=dict[str, Any])
async def compare(
    params: Annotated[CompareParams, Query()], request: Request, settings: SettingsDep
) -> Response:
    """Every configuration of a shipped dataset, measured and simulated, and one explained."""
    data = await run_in_threadpool(_datasets(request).all)  # a changed file is parsed again
    ds, row = choose(params, data)
    payload = {
        "folder": str(settings.datasets_dir),
        "dataset": dataset_key(ds["gpu"], sweep_of(ds)),
        "id": row["id"],
        "timeline_ctas": settings.compare_timeline_ctas,
    }
    try:
        out = await run_task(request, "compare", payload)
    except TaskError as exc:
        raise pool_errors(exc, settings, field=None) from None
    return Response(out, media_type="application/json")


def _shown_order(key: str) -> tuple[bool, str]:
    """The protocol's datasets first, by GPU key, then the other sweeps'."""
    return (":" in key, key)


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep) -> HTMLResponse:
    data = _datasets(request).all()
    return templates.TemplateResponse(
        request,
        "compare.html",
        {
            "view": view_at("/compare"),
            "datasets": [{**data[k], "key": k} for k in sorted(data, key=_shown_order)],
            "sweeps": SWEEPS,
        },
    )
